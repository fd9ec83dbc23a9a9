// Package manifest reads Kubernetes manifests — YAML or JSON files, several
// documents per file, directories, and v1 List objects — into the typed
// objects ovn-egress translates. Errors name the file and the line.
package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Error is a manifest that could not be read or decoded.
type Error struct {
	File string
	Line int
	Err  error
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Result is what the manifests held; Skipped names documents of other kinds.
type Result struct {
	translate.Objects
	// EgressIPs and the Namespaces and Pods their selectors choose from.
	EgressIPs  []*egressipv1.EgressIP
	Namespaces []*corev1.Namespace
	Pods       []*corev1.Pod
	Skipped    []string
}

// Read reads every path (files, or directories: their *.yaml, *.yml and
// *.json files, recursively, in name order).
func Read(paths ...string) (*Result, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, discoveryv1.AddToScheme, egressv1.AddToScheme, egressipv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	decoder := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	res := &Result{}
	for _, p := range paths {
		files, err := expand(p)
		if err != nil {
			return nil, &Error{File: p, Err: err}
		}
		for _, f := range files {
			if err := readFile(decoder, f, res); err != nil {
				return nil, err
			}
		}
	}
	return res, nil
}

func expand(p string) ([]string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	var out []string
	err = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch strings.ToLower(filepath.Ext(path)) {
		case ".yaml", ".yml", ".json":
			if !d.IsDir() {
				out = append(out, path)
			}
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

func readFile(decoder runtime.Decoder, file string, res *Result) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return &Error{File: file, Err: err}
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	line := 1
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return &Error{File: file, Line: line, Err: err}
		}
		docLine := line
		// The reader consumes the "---" line after each document.
		line += bytes.Count(doc, []byte("\n")) + 1
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		if err := decodeDoc(decoder, doc, res, file, docLine); err != nil {
			return err
		}
	}
}

// decodeDoc decodes one document that starts at line docLine of file.
func decodeDoc(decoder runtime.Decoder, doc []byte, res *Result, file string, docLine int) error {
	line := docLine + leadingBlankLines(doc)
	obj, gvk, err := decoder.Decode(doc, nil, nil)
	if err != nil {
		if runtime.IsNotRegisteredError(err) {
			// Another API's object (MetalLB's pools, for one): not ours to read.
			kind := ""
			if gvk != nil {
				kind = gvk.Kind
			} else {
				var tm metav1.TypeMeta
				_ = yaml.Unmarshal(doc, &tm)
				kind = tm.Kind
			}
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s:%d: %s", file, line, kind))
			return nil
		}
		if n := yamlLine(err); n > 0 {
			line = docLine + n
		}
		return &Error{File: file, Line: line, Err: err}
	}
	switch o := obj.(type) {
	case *egressv1.EgressService:
		res.EgressServices = append(res.EgressServices, o)
	case *corev1.Service:
		res.Services = append(res.Services, o)
	case *discoveryv1.EndpointSlice:
		res.EndpointSlices = append(res.EndpointSlices, o)
	case *corev1.Node:
		res.Nodes = append(res.Nodes, o)
	case *egressipv1.EgressIP:
		res.EgressIPs = append(res.EgressIPs, o)
	case *corev1.Namespace:
		res.Namespaces = append(res.Namespaces, o)
	case *corev1.Pod:
		res.Pods = append(res.Pods, o)
	case *corev1.ConfigMap:
		if _, ok := o.Labels[translate.ReportLabel]; !ok {
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s:%d: %s", file, line, gvk.Kind)) // not a readiness report
			break
		}
		res.Reports = append(res.Reports, o)
	case *corev1.List:
		for i, item := range o.Items {
			raw := item.Raw
			if len(raw) == 0 {
				continue
			}
			if err := decodeDoc(decoder, raw, res, fmt.Sprintf("%s:%d: item %d", file, line, i), 0); err != nil {
				return err
			}
		}
	default:
		res.Skipped = append(res.Skipped, fmt.Sprintf("%s:%d: %s", file, line, gvk.Kind))
	}
	return nil
}

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

// yamlLine returns how many lines into the document a YAML error points
// (0 when it does not say).
func yamlLine(err error) int {
	m := yamlLineRE.FindStringSubmatch(err.Error())
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return max(n-1, 0)
}

func leadingBlankLines(doc []byte) int {
	n := 0
	for _, l := range bytes.Split(doc, []byte("\n")) {
		t := bytes.TrimSpace(l)
		if len(t) != 0 && !bytes.HasPrefix(t, []byte("#")) && !bytes.Equal(t, []byte("---")) {
			break
		}
		n++
	}
	return n
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		t := bytes.TrimSpace(l)
		if bytes.HasPrefix(t, []byte("#")) || bytes.Equal(t, []byte("---")) {
			continue
		}
		out = append(out, l)
	}
	return bytes.Join(out, []byte("\n"))
}
