package main

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The objects as an API server hands them to an informer: what the
// kubelet, the scheduler and the EndpointSlice controller write beside
// what ovn-egress reads. A Node's images, capacity and system info, each
// endpoint's target pod and zone: an informer caches all of it unless it
// is trimmed, so the bench's memory figures count it too.

// nodeImages is how many container images a node's status lists (the
// kubelet reports up to 50).
const nodeImages = 30

// shapeNode adds to n what the kubelet and the control plane write.
func shapeNode(n *corev1.Node, i int) {
	for k, v := range map[string]string{
		"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		"kubernetes.io/hostname": n.Name, "kubernetes.io/os": "linux", "topology.kubernetes.io/zone": fmt.Sprintf("zone-%c", 'a'+i%3),
		"node.kubernetes.io/instance-type": "m5.2xlarge",
	} {
		n.Labels[k] = v
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations["node.alpha.kubernetes.io/ttl"] = "0"
	n.Annotations["volumes.kubernetes.io/controller-managed-attach-detach"] = "true"
	n.Annotations["kubeadm.alpha.kubernetes.io/cri-socket"] = "unix:///run/containerd/containerd.sock"
	n.UID = types.UID(fmt.Sprintf("6f1c2a3b-0000-4000-8000-%012d", i))
	n.Spec.ProviderID = fmt.Sprintf("aws:///us-east-1a/i-%017x", i)
	qty := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32475112Ki"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("101430960Ki"),
		"hugepages-1Gi": resource.MustParse("0"), "hugepages-2Mi": resource.MustParse("0")}
	n.Status.Capacity, n.Status.Allocatable = qty, qty.DeepCopy()
	t := metav1.Unix(1764547200, 0)
	for _, c := range []struct {
		t              corev1.NodeConditionType
		reason, status string
	}{{"MemoryPressure", "KubeletHasSufficientMemory", "False"}, {"DiskPressure", "KubeletHasNoDiskPressure", "False"},
		{"PIDPressure", "KubeletHasSufficientPID", "False"}, {"Ready", "KubeletReady", "True"}} {
		if cond := condition(n, c.t); cond != nil {
			continue // the topology's own (Ready)
		}
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: c.t, Status: corev1.ConditionStatus(c.status),
			LastHeartbeatTime: t, LastTransitionTime: t, Reason: c.reason, Message: "kubelet has " + c.reason})
	}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = 10250
	n.Status.NodeInfo = corev1.NodeSystemInfo{MachineID: fmt.Sprintf("%032x", i), SystemUUID: fmt.Sprintf("ec2%029x", i),
		BootID: fmt.Sprintf("%032x", i+1), KernelVersion: "6.1.0-28-cloud-amd64", OSImage: "Debian GNU/Linux 12 (bookworm)",
		ContainerRuntimeVersion: "containerd://1.7.24", KubeletVersion: "v1.34.1",
		OperatingSystem: "linux", Architecture: "amd64"}
	for j := range nodeImages {
		repo := fmt.Sprintf("registry.example/team-%02d/service-%02d", j%7, j)
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
			Names:     []string{fmt.Sprintf("%s@sha256:%064x", repo, j), fmt.Sprintf("%s:v1.%d.%d", repo, j, i%5)},
			SizeBytes: int64(20_000_000 + j*1_000_000)})
	}
}

func condition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// shapeSlice adds to s what the EndpointSlice controller writes: each
// endpoint's target pod, zone and serving state, the owner and the
// trigger time.
func shapeSlice(s *discoveryv1.EndpointSlice) {
	s.GenerateName = s.Labels[discoveryv1.LabelServiceName] + "-"
	s.Annotations = map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-12-01T00:00:00Z"}
	yes := true
	s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: s.Labels[discoveryv1.LabelServiceName],
		UID: types.UID("2b6e9c4d-0000-4000-8000-000000000000"), Controller: &yes, BlockOwnerDeletion: &yes}}
	for j := range s.Endpoints {
		e := &s.Endpoints[j]
		e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: s.Namespace,
			Name: fmt.Sprintf("%s-7d9f8b6c5d-%05d", s.Labels[discoveryv1.LabelServiceName], j),
			UID:  types.UID(fmt.Sprintf("9a8b7c6d-0000-4000-8000-%012d", j))}
		zone := "zone-a"
		e.Zone = &zone
		e.Conditions.Serving, e.Conditions.Terminating = &yes, new(bool)
	}
}
