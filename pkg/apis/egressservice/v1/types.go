package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SourceIPMode says how the source address of a Service's egress traffic is chosen.
type SourceIPMode string

const (
	// LoadBalancerIP: the pods backing the Service leave the cluster with the
	// Service's load-balancer ingress IP as source, through one host node.
	LoadBalancerIP SourceIPMode = "LoadBalancerIP"
	// Network: the source address is chosen by the masquerade rules of the
	// network's outgoing interface on each pod's own node; no SNAT to the LB IP.
	Network SourceIPMode = "Network"
)

// HostAll is the value of status.host for sourceIPBy=Network: every node
// handles the traffic of its own pods.
const HostAll = "ALL"

// EgressService is a CRD that allows the user to request that the source IP of
// egress packets originating from all of the pods that are endpoints of the
// corresponding LoadBalancer Service would be its ingress IP, or that the
// egress packets leave through a chosen network.
//
// The EgressService has the same namespace and name as its Service.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=egressservices,scope=Namespaced
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Assigned Host",type=string,JSONPath=".status.host"
// +kubebuilder:printcolumn:name="Source IP By",type=string,JSONPath=".spec.sourceIPBy"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].reason"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type EgressService struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec EgressServiceSpec `json:"spec,omitempty"`
	// +optional
	Status EgressServiceStatus `json:"status,omitempty"`
}

// EgressServiceSpec defines the desired state of EgressService.
type EgressServiceSpec struct {
	// Determines the source IP of egress traffic originating from the pods
	// backing the LoadBalancer Service. When LoadBalancerIP the source IP is set
	// to its LoadBalancer ingress IP. When Network the source IP is set according
	// to the interface of the Network, leveraging the masquerade rules that are
	// already in place. Typically these rules specify SNAT to the IP of the
	// outgoing interface, which means the packet will typically leave with the IP
	// of the node.
	// +kubebuilder:validation:Enum=LoadBalancerIP;Network
	// +optional
	SourceIPBy SourceIPMode `json:"sourceIPBy,omitempty"`

	// Allows limiting the nodes that can be selected to handle the service's
	// traffic when sourceIPBy=LoadBalancerIP. When present only a node whose
	// labels match the specified selectors can be selected for handling the
	// service's traffic. When it is not specified any node in the cluster can be
	// chosen to manage the service's traffic.
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="matchExpressions: operator must be one of In, NotIn, Exists, DoesNotExist"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['In', 'NotIn']) || (has(e.values) && size(e.values) > 0))",message="matchExpressions: values must be non-empty when operator is In or NotIn"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['Exists', 'DoesNotExist']) || !has(e.values) || size(e.values) == 0)",message="matchExpressions: values must be empty when operator is Exists or DoesNotExist"
	// +optional
	NodeSelector metav1.LabelSelector `json:"nodeSelector,omitempty"`

	// The network which this service should send egress and corresponding
	// ingress replies to. This is typically implemented as VRF mapping,
	// representing a numeric id or string name of a routing table which by
	// omission uses the default host routing.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Network string `json:"network,omitempty"`
}

// EgressServiceStatus defines the observed state of EgressService.
type EgressServiceStatus struct {
	// The name of the node selected to handle the service's traffic.
	// In case sourceIPBy=Network the field will be set to "ALL".
	// +required
	Host string `json:"host"`

	// Conditions say whether the service's egress works end to end and,
	// when it does not, which part stops it: Ready (traffic leaves as
	// asked), HostAssigned (a host is chosen), AgentsReady (the node agents
	// that carry the traffic report it programmed) and Announced (the
	// load-balancer IP is announced from the host). One set for the object,
	// never one per node; each condition's observedGeneration is the
	// generation it was computed from. An addition of ovn-egress: upstream's
	// status has only host.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EgressServiceList contains a list of EgressServices.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type EgressServiceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []EgressService `json:"items"`
}
