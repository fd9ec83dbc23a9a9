package conformance

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// notChecked is the cause the apiserver adds when schema errors stop the CEL
// rules from running.
const notChecked = `<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation`

func expr(key string, op metav1.LabelSelectorOperator, values ...string) metav1.LabelSelector {
	return metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}

// Invalid EgressServices are refused with the message a user sees, through
// the API and through kubectl. The specs are raw JSON, as a user writes them
// (the typed client cannot send "values": [] or leave out key).
func TestValidationRejects(t *testing.T) {
	t.Parallel()
	ns := kube.Namespace(t)
	for _, tc := range []struct {
		name, spec string
		causes     []string
	}{
		{"unknown-source-ip-by", `{"sourceIPBy":"Foo"}`,
			[]string{`spec.sourceIPBy: Unsupported value: "Foo": supported values: "LoadBalancerIP", "Network"`, notChecked}},
		{"in-without-values", `{"nodeSelector":{"matchExpressions":[{"key":"zone","operator":"In"}]}}`,
			[]string{`spec.nodeSelector: Invalid value: matchExpressions: values must be non-empty when operator is In or NotIn`}},
		{"notin-with-empty-values", `{"nodeSelector":{"matchExpressions":[{"key":"zone","operator":"NotIn","values":[]}]}}`,
			[]string{`spec.nodeSelector: Invalid value: matchExpressions: values must be non-empty when operator is In or NotIn`}},
		{"exists-with-values", `{"nodeSelector":{"matchExpressions":[{"key":"zone","operator":"Exists","values":["a"]}]}}`,
			[]string{`spec.nodeSelector: Invalid value: matchExpressions: values must be empty when operator is Exists or DoesNotExist`}},
		{"doesnotexist-with-values", `{"sourceIPBy":"LoadBalancerIP","nodeSelector":{"matchExpressions":[
			{"key":"zone","operator":"DoesNotExist","values":["a","b"]}]}}`,
			[]string{`spec.nodeSelector: Invalid value: matchExpressions: values must be empty when operator is Exists or DoesNotExist`}},
		{"unknown-operator", `{"nodeSelector":{"matchExpressions":[{"key":"zone","operator":"Near","values":["a"]}]}}`,
			[]string{`spec.nodeSelector: Invalid value: matchExpressions: operator must be one of In, NotIn, Exists, DoesNotExist`}},
		// A tenant's network name is bounded (a name the kernel refuses
		// once failed every node agent's sync).
		{"network-too-long", `{"sourceIPBy":"Network","network":"` + strings.Repeat("n", 64) + `"}`,
			[]string{`spec.network: Too long: may not be more than 63 bytes`, notChecked}},
		{"expression-without-key", `{"nodeSelector":{"matchExpressions":[{"operator":"Exists"}]}}`,
			[]string{`spec.nodeSelector.matchExpressions[0].key: Required value`, notChecked}},
	} {
		// The API joins several causes in brackets; kubectl lists them.
		want := fmt.Sprintf(`EgressService.k8s.ovn.org %q is invalid: `, tc.name)
		wantCLI := fmt.Sprintf(`The EgressService %q is invalid: `, tc.name)
		if len(tc.causes) == 1 {
			want += tc.causes[0]
			wantCLI += tc.causes[0]
		} else {
			want += "[" + strings.Join(tc.causes, ", ") + "]"
			wantCLI += "\n* " + strings.Join(tc.causes, "\n* ")
		}
		manifest := `{` + kindES + `,"metadata":{"name":"` + tc.name + `"},"spec":` + tc.spec + `}`
		resp := do(t, admin(), request{method: http.MethodPost, path: collectionPath(ns), contentType: "application/json", body: manifest})
		if !apierrors.IsInvalid(resp.err) || resp.err.Error() != want {
			t.Errorf("POST %s: %d %v\nwant 422 %s", tc.name, resp.code, resp.err, want)
		}

		file := filepath.Join(t.TempDir(), tc.name+".json")
		if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := kube.Kubectl("create", "-n", ns, "-f", file)
		if err == nil || !strings.HasSuffix(err.Error(), ": "+wantCLI) {
			t.Errorf("kubectl create %s: got %v\nwant it to end with: %s", tc.name, err, wantCLI)
		}
	}
	if n := names(t, ns, metav1.ListOptions{}); len(n) != 0 {
		t.Errorf("stored: %v; want nothing", n)
	}

	// An update to an invalid spec is refused the same way.
	es := create(t, ns, "valid", egressv1.EgressServiceSpec{NodeSelector: expr("zone", metav1.LabelSelectorOpIn, "a")})
	es.Spec.NodeSelector.MatchExpressions[0].Values = nil
	_, err := kube.Egress.K8sV1().EgressServices(ns).Update(t.Context(), es, metav1.UpdateOptions{})
	if want := `EgressService.k8s.ovn.org "valid" is invalid: spec.nodeSelector: Invalid value: matchExpressions: values must be non-empty when operator is In or NotIn`; err == nil || err.Error() != want {
		t.Errorf("update to In without values: got %v; want %s", err, want)
	}
}

// Every valid combination of sourceIPBy, nodeSelector and network is accepted
// and stored as sent.
func TestValidationAccepts(t *testing.T) {
	t.Parallel()
	ns := kube.Namespace(t)
	selectors := []string{
		``,
		`{}`,
		`{"matchLabels":{"egress":"yes","zone":"a"}}`,
		`{"matchExpressions":[{"key":"zone","operator":"In","values":["a"]}]}`,
		`{"matchExpressions":[{"key":"zone","operator":"NotIn","values":["a","b"]}]}`,
		`{"matchExpressions":[{"key":"egress","operator":"Exists"}]}`,
		`{"matchExpressions":[{"key":"egress","operator":"Exists","values":[]}]}`,
		`{"matchExpressions":[{"key":"drained","operator":"DoesNotExist"}]}`,
		`{"matchExpressions":[{"key":"drained","operator":"DoesNotExist","values":[]}]}`,
		`{"matchLabels":{"egress":"yes"},"matchExpressions":[{"key":"zone","operator":"In","values":["a","b"]},
			{"key":"rack","operator":"NotIn","values":["r9"]},{"key":"egress","operator":"Exists"},
			{"key":"drained","operator":"DoesNotExist"}]}`,
	}
	n := 0
	for _, source := range []string{``, `"sourceIPBy":"LoadBalancerIP",`, `"sourceIPBy":"Network",`} {
		for _, sel := range selectors {
			for _, network := range []string{``, `"network":"blue",`, `"network":"100",`} {
				n++
				fields := source + network
				if sel != "" {
					fields += `"nodeSelector":` + sel + `,`
				}
				spec := `{` + strings.TrimSuffix(fields, ",") + `}`
				resp := do(t, admin(), request{method: http.MethodPost, path: collectionPath(ns), contentType: "application/json",
					body: `{` + kindES + fmt.Sprintf(`,"metadata":{"name":"ok-%d"},"spec":`, n) + spec + `}`})
				if resp.code != http.StatusCreated {
					t.Errorf("spec %s: %d %v; want 201", spec, resp.code, resp.err)
					continue
				}
				var want egressv1.EgressServiceSpec
				if err := json.Unmarshal([]byte(spec), &want); err != nil {
					t.Fatal(err)
				}
				if got := object(t, resp.body).Spec; !equalSpec(got, want) {
					t.Errorf("spec %s: stored %+v", spec, got)
				}
			}
		}
	}
	if got := names(t, ns, metav1.ListOptions{}); len(got) != n {
		t.Errorf("stored %d objects; want %d", len(got), n)
	}
}
