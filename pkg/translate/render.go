package translate

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// NBCtlCommands renders the desired rows as ovn-nbctl invocations, one per
// row (a policy or NAT row together with the mutation that attaches it to
// its router), without --db: run in order with OVN_NB_DB set against an NB
// holding the ovn-kubernetes topology, they create exactly these rows,
// external_ids included. Each command is an argv, shell-quote it with
// ShellQuote to print it.
func NBCtlCommands(d *Desired) [][]string {
	var out [][]string
	for _, k := range d.Keys() {
		r := d.Rows[k]
		for _, as := range r.AddressSets {
			cmd := []string{"ovn-nbctl", "create", "Address_Set", "name=" + as.Name, "addresses=" + ovsdbSet(as.Addresses)}
			out = append(out, append(cmd, externalIDArgs(as.ExternalIDs)...))
		}
		for _, p := range r.Policies {
			cmd := []string{"ovn-nbctl", "--id=@p", "create", "Logical_Router_Policy",
				fmt.Sprintf("priority=%d", p.Priority), "match=" + ovsdbString(p.Match), "action=" + p.Action}
			if len(p.Nexthops) > 0 {
				cmd = append(cmd, "nexthops="+ovsdbSet(p.Nexthops))
			}
			cmd = append(cmd, mapArgs("options", p.Options)...)
			cmd = append(cmd, externalIDArgs(p.ExternalIDs)...)
			out = append(out, append(cmd, "--", "add", "Logical_Router", p.Router, "policies", "@p"))
		}
		for _, rt := range r.Routes {
			cmd := []string{"ovn-nbctl", "--id=@r", "create", "Logical_Router_Static_Route", "ip_prefix=" + ovsdbString(rt.IPPrefix),
				"nexthop=" + ovsdbString(rt.Nexthop), "policy=" + rt.Policy}
			cmd = append(cmd, externalIDArgs(rt.ExternalIDs)...)
			out = append(out, append(cmd, "--", "add", "Logical_Router", rt.Router, "static_routes", "@r"))
		}
		for _, n := range r.NATs {
			cmd := []string{"ovn-nbctl", "--id=@n", "create", "NAT", "type=" + n.Type,
				"external_ip=" + ovsdbString(n.ExternalIP), "logical_ip=" + ovsdbString(n.LogicalIP)}
			if n.Match != "" {
				cmd = append(cmd, "match="+ovsdbString(n.Match), fmt.Sprintf("priority=%d", n.Priority))
			}
			if n.ExternalPortRange != "" {
				cmd = append(cmd, "external_port_range="+ovsdbString(n.ExternalPortRange))
			}
			cmd = append(cmd, externalIDArgs(n.ExternalIDs)...)
			out = append(out, append(cmd, "--", "add", "Logical_Router", n.Router, "nat", "@n"))
		}
	}
	return out
}

func externalIDArgs(ids map[string]string) []string { return mapArgs("external_ids", ids) }

// mapArgs renders a map column as column:"key"="value" arguments, sorted.
func mapArgs(column string, m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, column+":"+ovsdbString(k)+"="+ovsdbString(m[k]))
	}
	return out
}

// ovsdbString quotes a string in OVSDB's ovs-vsctl/ovn-nbctl value syntax.
func ovsdbString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func ovsdbSet(ss []string) string {
	if len(ss) == 0 {
		return "[]"
	}
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = ovsdbString(s)
	}
	return strings.Join(q, ",")
}

// ShellQuote renders an argv as one POSIX shell line.
func ShellQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=@./:,") == "" {
			q[i] = a
			continue
		}
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// OVSDBTransact renders the desired rows as the params of one OVSDB
// "transact" request: ["OVN_Northbound", op, ...], inserting every row and
// attaching policies and NAT rows to their routers by named UUID.
func OVSDBTransact(d *Desired) ([]byte, error) {
	params := []any{"OVN_Northbound"}
	attach := map[string]map[string][]any{} // router -> column -> named uuids
	var routers []string
	n := 0
	named := func(column, router string) string {
		n++
		id := fmt.Sprintf("row%d", n)
		if attach[router] == nil {
			attach[router] = map[string][]any{}
			routers = append(routers, router)
		}
		attach[router][column] = append(attach[router][column], []any{"named-uuid", id})
		return id
	}
	ovsMap := func(m map[string]string) []any {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		pairs := []any{}
		for _, k := range keys {
			pairs = append(pairs, []any{k, m[k]})
		}
		return []any{"map", pairs}
	}
	ovsSet := func(ss []string) []any {
		items := []any{}
		for _, s := range ss {
			items = append(items, s)
		}
		return []any{"set", items}
	}
	for _, k := range d.Keys() {
		r := d.Rows[k]
		for _, as := range r.AddressSets {
			params = append(params, map[string]any{"op": "insert", "table": "Address_Set",
				"row": map[string]any{"name": as.Name, "addresses": ovsSet(as.Addresses), "external_ids": ovsMap(as.ExternalIDs)}})
		}
		for _, p := range r.Policies {
			row := map[string]any{"priority": p.Priority, "match": p.Match, "action": p.Action, "external_ids": ovsMap(p.ExternalIDs)}
			if len(p.Nexthops) > 0 {
				row["nexthops"] = ovsSet(p.Nexthops)
			}
			if len(p.Options) > 0 {
				row["options"] = ovsMap(p.Options)
			}
			params = append(params, map[string]any{"op": "insert", "table": "Logical_Router_Policy", "uuid-name": named("policies", p.Router), "row": row})
		}
		for _, rt := range r.Routes {
			params = append(params, map[string]any{"op": "insert", "table": "Logical_Router_Static_Route", "uuid-name": named("static_routes", rt.Router),
				"row": map[string]any{"ip_prefix": rt.IPPrefix, "nexthop": rt.Nexthop, "policy": rt.Policy, "external_ids": ovsMap(rt.ExternalIDs)}})
		}
		for _, nat := range r.NATs {
			row := map[string]any{"type": nat.Type, "external_ip": nat.ExternalIP, "logical_ip": nat.LogicalIP, "external_ids": ovsMap(nat.ExternalIDs)}
			if nat.Match != "" {
				row["match"], row["priority"] = nat.Match, nat.Priority
			}
			if nat.ExternalPortRange != "" {
				row["external_port_range"] = nat.ExternalPortRange
			}
			params = append(params, map[string]any{"op": "insert", "table": "NAT", "uuid-name": named("nat", nat.Router), "row": row})
		}
	}
	for _, router := range routers {
		for _, col := range []string{"policies", "static_routes", "nat"} {
			if uuids := attach[router][col]; len(uuids) > 0 {
				params = append(params, map[string]any{"op": "mutate", "table": "Logical_Router",
					"where":     []any{[]any{"name", "==", router}},
					"mutations": []any{[]any{col, "insert", []any{"set", uuids}}}})
			}
		}
	}
	return json.MarshalIndent(params, "", " ")
}

// YAML renders the desired rows and problems for people to read.
func YAML(d *Desired) ([]byte, error) {
	type keyRows struct {
		Key  Key `json:"key"`
		Rows `json:",inline"`
	}
	doc := struct {
		Keys     []keyRows `json:"keys"`
		Problems []Problem `json:"problems,omitempty"`
	}{}
	for _, k := range d.Keys() {
		doc.Keys = append(doc.Keys, keyRows{Key: k, Rows: *d.Rows[k]})
	}
	doc.Problems = d.Problems
	return yaml.Marshal(doc)
}
