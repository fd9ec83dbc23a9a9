//go:build chaos

package local

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// foreignState is what ovn-egress must never change: the NB rows it does
// not own (the reference columns it mutates to point at its own rows left
// out), the Nodes' other labels, and each host's other ip rules and
// nftables tables.
type foreignState struct {
	nb     map[string]string // table → its foreign rows, as JSON
	labels map[string]string // node → its labels that are not the soak's or ovn-egress'
	hosts  map[string]string // node → ip rules (not at 5000) and nft tables (not ovn-egress', not the harness')
}

// foreignTables and the columns of their rows that ovn-egress may mutate
// (the router's policies, NAT and static routes point at its rows too).
var foreignTables = map[string][]string{
	"Logical_Router_Policy": nil, "NAT": nil, "Address_Set": nil, "Logical_Router_Static_Route": nil,
	"Logical_Router": {"policies", "nat", "static_routes"}, "Logical_Switch": nil, "Logical_Switch_Port": nil,
	"Logical_Router_Port": nil, "Load_Balancer": nil,
}

func (c *cluster) snapshotForeign() foreignState {
	c.t.Helper()
	st := foreignState{nb: map[string]string{}, labels: map[string]string{}, hosts: map[string]string{}}
	for table, skip := range foreignTables {
		out := c.ovn.MustNBCtl(c.t, "--format=json", "list", table)
		var res struct {
			Headings []string `json:"headings"`
			Data     [][]any  `json:"data"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			c.t.Fatalf("NB %s as JSON: %v", table, err)
		}
		var rows []string
		for _, row := range res.Data {
			m := map[string]any{}
			for i, h := range res.Headings {
				if !slices.Contains(skip, h) {
					m[h] = row[i]
				}
			}
			if ids, _ := json.Marshal(m["external_ids"]); strings.Contains(string(ids), `"ovn-egress"`) {
				continue // owned
			}
			b, _ := json.Marshal(m)
			rows = append(rows, string(b))
		}
		slices.Sort(rows)
		st.nb[table] = strings.Join(rows, "\n")
	}
	for _, n := range c.topo.Nodes {
		node, err := kube.Client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		var kv []string
		for k, v := range node.Labels {
			if k != "egress" && !hosts.IsNodeLabel(k) {
				kv = append(kv, k+"="+v)
			}
		}
		slices.Sort(kv)
		st.labels[n.Name] = strings.Join(kv, ",")
		var host []string
		for _, fam := range []string{"-4", "-6"} {
			out, _ := c.dp.Hosts[n.Name].Run("ip", fam, "rule", "show")
			for _, l := range strings.Split(out, "\n") {
				if l != "" && !strings.HasPrefix(l, "5000:") {
					host = append(host, l)
				}
			}
		}
		out, _ := c.dp.Hosts[n.Name].Run("nft", "list", "tables")
		for _, l := range strings.Split(out, "\n") {
			if l != "" && !strings.HasSuffix(l, " ovn-egress") && !strings.Contains(l, " oe-") {
				host = append(host, l)
			}
		}
		st.hosts[n.Name] = strings.Join(host, "\n")
	}
	return st
}

// foreignUntouched fails the run for any difference from the snapshot.
func (c *cluster) foreignUntouched(before foreignState) {
	c.t.Helper()
	now := c.snapshotForeign()
	for _, table := range slices.Sorted(maps.Keys(before.nb)) {
		if before.nb[table] != now.nb[table] {
			c.t.Errorf("NB %s: rows ovn-egress does not own changed:\nbefore:\n%s\nnow:\n%s", table, before.nb[table], now.nb[table])
		}
	}
	for node, l := range before.labels {
		if now.labels[node] != l {
			c.t.Errorf("node %s: labels ovn-egress does not own changed: %q → %q", node, l, now.labels[node])
		}
	}
	for node, h := range before.hosts {
		if now.hosts[node] != h {
			c.t.Errorf("node %s: ip rules or nftables tables ovn-egress does not own changed:\nbefore:\n%s\nnow:\n%s", node, h, now.hosts[node])
		}
	}
}

// hostAgreement checks status.host against the labels and the hosts'
// kernels: the egress-service label of each service on exactly its host,
// and each node's SNAT map exactly the endpoints of the services it hosts
// mapped to their LB IPs — computed here from the API objects.
func (s *chaosState) hostAgreement(lbs map[string][]netip.Addr) {
	c := s.c
	var problems []string
	deadline := time.Now().Add(30 * time.Second)
	for problems = s.disagreements(lbs); len(problems) > 0 && time.Now().Before(deadline); problems = s.disagreements(lbs) {
		time.Sleep(200 * time.Millisecond) // a withdrawal's grace, a label patch on its way
	}
	for _, p := range problems {
		c.t.Error(p)
	}
}

// disagreements lists where status.host, the labels and the hosts' SNAT
// maps disagree now (an API error is one too).
func (s *chaosState) disagreements(lbs map[string][]netip.Addr) []string {
	c := s.c
	ctx := context.Background()
	nodes, err := kube.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"nodes: " + err.Error()}
	}
	s.mu.Lock()
	endpoints := maps.Clone(s.endpoints)
	s.mu.Unlock()
	var problems []string
	want := map[string][]string{} // node → "endpoint → LB IP" lines
	for _, name := range chaosServices {
		es, err := kube.Egress.K8sV1().EgressServices(c.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return []string{"EgressService " + name + ": " + err.Error()}
		}
		h := es.Status.Host
		label := hosts.NodeLabel(c.ns, name)
		for _, node := range nodes.Items {
			if _, has := node.Labels[label]; has != (node.Name == h) {
				problems = append(problems, fmt.Sprintf("service %s hosted on %q: node %s has its label %v", name, h, node.Name, has))
			}
		}
		if h == "" {
			continue
		}
		for _, p := range endpoints[name] {
			for _, ip := range p.ips {
				for _, lb := range lbs[name] {
					if ipfamily.Of(lb) == ipfamily.Of(ip) {
						want[h] = append(want[h], ip.String()+" → "+lb.String())
					}
				}
			}
		}
	}
	for _, n := range c.topo.Nodes {
		got := c.snatElements(n.Name)
		w := want[n.Name]
		slices.Sort(w)
		if !slices.Equal(got, w) {
			problems = append(problems, fmt.Sprintf("node %s's SNAT maps %v, want %v", n.Name, got, w))
		}
		// No service of the soak names a network: the agents' plan holds
		// no ip rule at their priority.
		for _, fam := range []string{"-4", "-6"} {
			out, _ := c.dp.Hosts[n.Name].Run("ip", fam, "rule", "show", "priority", "5000")
			if strings.TrimSpace(out) != "" {
				problems = append(problems, fmt.Sprintf("node %s has ip rules at 5000 no service asks for: %s", n.Name, out))
			}
		}
	}
	return problems
}

// snatElements lists node's SNAT map elements as "endpoint → SNAT IP".
func (c *cluster) snatElements(node string) []string {
	var out []string
	for _, m := range []string{"snat-v4", "snat-v6"} {
		text, err := c.dp.Hosts[node].Run("nft", "-j", "list", "map", "inet", "ovn-egress", m)
		if err != nil {
			continue
		}
		var doc struct {
			Nftables []struct {
				Map *struct {
					Elem [][]any `json:"elem"`
				} `json:"map"`
			} `json:"nftables"`
		}
		if json.Unmarshal([]byte(text), &doc) != nil {
			return []string{"nft -j on " + node + ": " + text}
		}
		for _, o := range doc.Nftables {
			if o.Map == nil {
				continue
			}
			for _, e := range o.Map.Elem {
				k, v := e[0], e[1]
				if m, ok := k.(map[string]any); ok { // an element with a comment
					k = m["elem"].(map[string]any)["val"]
				}
				out = append(out, strings.TrimSpace(anyString(k))+" → "+anyString(v))
			}
		}
	}
	slices.Sort(out)
	return out
}

func anyString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// nothingLeft deletes every EgressService and checks that no row, label
// or kernel state of ovn-egress stays behind, and that no owned NB row
// ever had a twin.
func (s *chaosState) nothingLeft() {
	c := s.c
	ids := c.ovn.MustNBCtl(c.t, "--bare", "--columns=external_ids", "find", "Logical_Router_Policy", "external_ids:k8s.ovn.org/owner-controller=ovn-egress")
	var seen []string
	for _, l := range strings.Split(ids, "\n") {
		for _, f := range strings.Fields(l) {
			if strings.HasPrefix(f, "\"k8s.ovn.org/id\"=") || strings.HasPrefix(f, "k8s.ovn.org/id=") {
				if slices.Contains(seen, f) {
					c.t.Errorf("two owned policies with %s", f)
				}
				seen = append(seen, f)
			}
		}
	}
	if err := kube.Egress.K8sV1().EgressServices(c.ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		c.t.Fatal(err)
	}
	// The node-IP sets stay: they belong to no service (the allow
	// policies of every service point at them).
	var left string
	deadline := time.Now().Add(30 * time.Second)
	for {
		left = ""
		for _, table := range []string{"Logical_Router_Policy", "Address_Set", "NAT", "Logical_Router_Static_Route"} {
			out, err := c.ovn.NBCtl("--bare", "--columns=external_ids", "find", table, "external_ids:k8s.ovn.org/owner-controller=ovn-egress")
			if err != nil {
				left += table + ": " + err.Error() + "\n" // unread is not empty
			}
			for _, row := range strings.Split(strings.TrimSpace(out), "\n\n") {
				if row != "" && !strings.Contains(row, "owner-type\"=EgressServiceNodeIPs") && !strings.Contains(row, "owner-type=EgressServiceNodeIPs") {
					left += table + ": " + row + "\n"
				}
			}
		}
		if left == "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if left != "" {
		c.t.Errorf("ovn-egress rows left in NB once every EgressService was deleted:\n%s", left)
	}
	c.eventually("no SNAT element and no egress-service label left", 30*time.Second, func() bool {
		for _, n := range c.topo.Nodes {
			if len(c.snatElements(n.Name)) > 0 {
				return false
			}
			node, err := kube.Client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
			if err != nil {
				return false
			}
			for k := range node.Labels {
				if hosts.IsNodeLabel(k) {
					return false
				}
			}
		}
		return true
	})
}
