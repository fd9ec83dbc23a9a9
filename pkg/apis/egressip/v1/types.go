package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EgressIP asks that every pod of the namespaces matching namespaceSelector
// (and, when podSelector is set, matching it too) leaves the cluster with
// one of spec.egressIPs as source, through the node each IP is assigned to.
// Pod to pod, pod to node and pod to service traffic keep the pod's address.
//
// The CRD has no status subresource, as upstream's has none:
// ovn-kubernetes' own EgressIP controller writes status with a JSON patch on
// the main resource, which a status subresource would make the API server
// drop without an error (docs/egressip.md). ovn-egress's master writes
// status the same way, on the main resource.
//
// +genclient
// +genclient:nonNamespaced
// +genclient:noStatus
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=egressips,scope=Cluster,shortName=eip
// +kubebuilder:printcolumn:name="EgressIPs",type=string,JSONPath=".spec.egressIPs[*]"
// +kubebuilder:printcolumn:name="Assigned Node",type=string,JSONPath=".status.items[*].node"
// +kubebuilder:printcolumn:name="Assigned EgressIPs",type=string,JSONPath=".status.items[*].egressIP"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].reason"
type EgressIP struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Specification of the desired behavior of EgressIP.
	Spec EgressIPSpec `json:"spec"`
	// Observed status of EgressIP: written by the master only (a patch of
	// status on the main resource; the CRD has no status subresource).
	// +optional
	Status EgressIPStatus `json:"status,omitempty"`
}

// EgressIPSpec is the desired state of an EgressIP.
type EgressIPSpec struct {
	// EgressIPs are the source addresses requested, IPv4 and/or IPv6, each
	// at most once. Each is assigned to at most one node whose network
	// contains it; one object's IPs go to different nodes.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="self.all(ip, isIP(ip))",message="every egressIPs item must be an IPv4 or IPv6 address"
	// +kubebuilder:validation:XValidation:rule="self.all(ip, self.exists_one(o, o == ip))",message="egressIPs must not repeat an address"
	EgressIPs []string `json:"egressIPs"`
	// NamespaceSelector selects the namespaces whose pods use the egress
	// IPs. Mandatory. (Label keys and values are checked when the selector
	// is used: an invalid one is an Event, not a silent no-match.)
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="matchExpressions: operator must be one of In, NotIn, Exists, DoesNotExist"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['In', 'NotIn']) || (has(e.values) && size(e.values) > 0))",message="matchExpressions: values must be non-empty when operator is In or NotIn"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['Exists', 'DoesNotExist']) || !has(e.values) || size(e.values) == 0)",message="matchExpressions: values must be empty when operator is Exists or DoesNotExist"
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`
	// PodSelector narrows the pods of the selected namespaces to those
	// matching it. Optional: unset (or empty) selects every pod of them.
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="matchExpressions: operator must be one of In, NotIn, Exists, DoesNotExist"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['In', 'NotIn']) || (has(e.values) && size(e.values) > 0))",message="matchExpressions: values must be non-empty when operator is In or NotIn"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['Exists', 'DoesNotExist']) || !has(e.values) || size(e.values) == 0)",message="matchExpressions: values must be empty when operator is Exists or DoesNotExist"
	// +optional
	PodSelector metav1.LabelSelector `json:"podSelector,omitempty"`
}

// EgressIPStatus is what the master assigned.
type EgressIPStatus struct {
	// Items are the assigned egress IPs, each with the node that holds it.
	// An IP of spec.egressIPs without an item is unassigned; the object's
	// Events say why.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Items []EgressIPStatusItem `json:"items,omitempty"`

	// Conditions: Ready (the selected pods leave with the egress IPs) and
	// Assigned (every IP is held; when not, the reason says why). Without a
	// status subresource every write of status is a new generation: the
	// master writes the conditions with the generation its write makes as
	// their observedGeneration. An addition of ovn-egress: upstream's
	// status has only items.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EgressIPStatusItem is one assigned egress IP.
type EgressIPStatusItem struct {
	// Node is the name of the node the IP is assigned to.
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// EgressIP is the assigned address, one of spec.egressIPs.
	// +kubebuilder:validation:MaxLength=45
	EgressIP string `json:"egressIP"`
}

// EgressIPList is a list of EgressIP.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type EgressIPList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the EgressIPs.
	Items []EgressIP `json:"items"`
}
