package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// Apply creates or updates, by server-side apply with forced ownership, every
// object of the YAML or JSON manifests at paths (files, or directories of
// *.yaml, *.yml and *.json; multi-document and kind List both work).
// Namespaces go first, then CRDs, each waited for until Established and
// served, then the rest in file order. Namespaced objects without a
// namespace go to "default".
func (k *Kube) Apply(ctx context.Context, paths ...string) error {
	var objs []*unstructured.Unstructured
	for _, p := range paths {
		more, err := readManifests(p)
		if err != nil {
			return err
		}
		objs = append(objs, more...)
	}
	rank := func(u *unstructured.Unstructured) int {
		switch gk := u.GroupVersionKind().GroupKind(); {
		case gk == schema.GroupKind{Kind: "Namespace"}:
			return 0
		case isCRD(gk):
			return 1
		}
		return 2
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int { return rank(a) - rank(b) })
	// CRDs are waited for together, before the first object after them:
	// each wait includes the apiserver's 2 s after Established, which
	// then passes once for all of them rather than once per CRD.
	var crds []string
	for _, u := range objs {
		if len(crds) > 0 && !isCRD(u.GroupVersionKind().GroupKind()) {
			if err := k.waitCRDs(ctx, crds); err != nil {
				return err
			}
			crds = nil
		}
		if err := k.applyOne(ctx, u); err != nil {
			return err
		}
		if isCRD(u.GroupVersionKind().GroupKind()) {
			crds = append(crds, u.GetName())
		}
	}
	return k.waitCRDs(ctx, crds)
}

func (k *Kube) waitCRDs(ctx context.Context, names []string) error {
	for _, n := range names {
		if err := k.waitCRD(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

const crdGroup = "apiextensions.k8s.io"

func isCRD(gk schema.GroupKind) bool {
	return gk.Group == crdGroup && gk.Kind == "CustomResourceDefinition"
}

func (k *Kube) applyOne(ctx context.Context, u *unstructured.Unstructured) error {
	gvk := u.GroupVersionKind()
	what := gvk.Kind + " " + u.GetName()
	m, err := k.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) { // a CRD applied just now
		k.mapper.Reset()
		m, err = k.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return fmt.Errorf("apply %s: %w", what, err)
	}
	var ri dynamic.ResourceInterface = k.Dynamic.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if u.GetNamespace() == "" {
			u.SetNamespace(metav1.NamespaceDefault)
		}
		ri = k.Dynamic.Resource(m.Resource).Namespace(u.GetNamespace())
	}
	if _, err := ri.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: fieldOwner, Force: true}); err != nil {
		return fmt.Errorf("apply %s: %w", what, err)
	}
	return nil
}

// waitCRD waits until the CRD is Established, its resource is listed by
// discovery and its watch cache is ready (until then the apiserver answers
// 429 "storage is (re)initializing"), so that the first request of a test
// neither races a 404 nor waits for a Retry-After. It also waits out the
// 2 s after Established in which the apiserver delays every create of the
// resource by 2 s (apiextensions-apiserver's "justCreated" rule for HA
// clusters), which belongs in the start-up rather than in the first test.
func (k *Kube) waitCRD(ctx context.Context, name string) error {
	var (
		last        error
		established time.Time
	)
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		established, last = k.crdServed(ctx, name)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not served: %w (last: %v)", name, err, last)
	}
	k.mapper.Reset()
	// The server compares with the same second-precision time, on the same clock.
	select {
	case <-time.After(time.Until(established.Add(2*time.Second + 50*time.Millisecond))):
	case <-ctx.Done():
		return fmt.Errorf("CRD %s: %w", name, ctx.Err())
	}
	return nil
}

// crdServed checks that the CRD name is served and returns when it became
// Established.
func (k *Kube) crdServed(ctx context.Context, name string) (time.Time, error) {
	crds := schema.GroupVersionResource{Group: crdGroup, Version: "v1", Resource: "customresourcedefinitions"}
	crd, err := k.Dynamic.Resource(crds).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return time.Time{}, err
	}
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	i := slices.IndexFunc(conds, func(c any) bool {
		m, _ := c.(map[string]any)
		return m["type"] == "Established" && m["status"] == "True"
	})
	if i < 0 {
		return time.Time{}, errors.New("not Established yet")
	}
	since, _ := conds[i].(map[string]any)["lastTransitionTime"].(string)
	established, err := time.Parse(time.RFC3339, since)
	if err != nil {
		return time.Time{}, fmt.Errorf("established condition: %w", err)
	}
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		vm, _ := v.(map[string]any)
		if served, _ := vm["served"].(bool); !served {
			continue
		}
		gv := group + "/" + fmt.Sprint(vm["name"])
		list, err := k.Client.Discovery().ServerResourcesForGroupVersion(gv)
		if err != nil {
			return time.Time{}, err
		}
		if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == plural }) {
			return time.Time{}, fmt.Errorf("%s not in discovery yet", plural)
		}
		err = k.Client.Discovery().RESTClient().Get().AbsPath("/apis", gv, plural).
			Param("limit", "1").MaxRetries(0).Do(ctx).Error()
		if err != nil {
			return time.Time{}, fmt.Errorf("list %s: %w", plural, err)
		}
	}
	return established, nil
}

// readManifests decodes every object of a manifest file, or of the manifest
// files directly in a directory, in name order.
func readManifests(path string) ([]*unstructured.Unstructured, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("manifests: %w", err)
	}
	files := []string{path}
	if st.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("manifests: %w", err)
		}
		files = files[:0]
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("manifests: %w", err)
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("decode %s: %w", f, err)
			}
			if len(u.Object) == 0 { // an empty document
				continue
			}
			if !u.IsList() {
				objs = append(objs, u)
				continue
			}
			if err := u.EachListItem(func(o runtime.Object) error {
				objs = append(objs, o.(*unstructured.Unstructured))
				return nil
			}); err != nil {
				return nil, fmt.Errorf("decode %s: %w", f, err)
			}
		}
	}
	return objs, nil
}
