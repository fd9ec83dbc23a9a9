//go:build tools

// Package tools pins MetalLB's controller and speaker, built into
// bin/testbin by hack/build-testbin.sh as test peers (nothing of them is
// committed but this module's go.mod and go.sum).
package tools

import (
	_ "go.universe.tf/metallb/controller"
	_ "go.universe.tf/metallb/speaker"
)
