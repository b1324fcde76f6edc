package main

// Admin client used by the program itself: readiness checks and node registration.

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type adminClient struct {
	cs kubernetes.Interface
}

func newAdminClient(kubeconfig string) (*adminClient, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS = 100
	cfg.Burst = 200
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &adminClient{cs: cs}, nil
}

func (a *adminClient) healthy(ctx context.Context, path string) (bool, error) {
	status := 0
	res := a.cs.Discovery().RESTClient().Get().AbsPath(path).Do(ctx).StatusCode(&status)
	if status == 200 {
		return true, nil
	}
	return false, res.Error()
}

func (a *adminClient) namespaceReady(ctx context.Context) (bool, error) {
	_, err := a.cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	return err == nil, err
}

func (a *adminClient) defaultSAReady(ctx context.Context) (bool, error) {
	_, err := a.cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
	return err == nil, err
}

func (a *adminClient) nodeReady(ctx context.Context) (bool, error) {
	nodes, err := a.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err
	}
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
	}
	return false, nil
}

// dropNodeLease deletes the simulated node's lease that a previous run on
// the same data left (`down --keep`, then `up`). kwok v0.8.0's lease
// controller, finding that lease on its first try, fails to create its own
// and then renews it without ever starting to manage the node: the node's
// Pods were never made Running nor deleted after a restart (the e2e test
// an_expired_watch_relists_without_losing_a_deletion waited 120 s for one).
func (a *adminClient) dropNodeLease(ctx context.Context) error {
	err := a.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, nodeName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// ensureNode registers the simulated node (the part of a kubelet's job that
// kwok leaves to whoever creates the Node object), as kwokctl's node template does.
func (a *adminClient) ensureNode(ctx context.Context) error {
	_, err := a.cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return err
	}
	rl := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("5000"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: nodeName,
			Annotations: map[string]string{
				"kwok.x-k8s.io/node":           "fake",
				"node.alpha.kubernetes.io/ttl": "0",
			},
			Labels: map[string]string{
				"beta.kubernetes.io/arch":       "amd64",
				"beta.kubernetes.io/os":         "linux",
				"kubernetes.io/arch":            "amd64",
				"kubernetes.io/hostname":        nodeName,
				"kubernetes.io/os":              "linux",
				"kubernetes.io/role":            "agent",
				"node-role.kubernetes.io/agent": "",
				"type":                          "kwok",
			},
		},
		Spec: corev1.NodeSpec{
			PodCIDR:  "10.244.0.0/24",
			PodCIDRs: []string{"10.244.0.0/24"},
		},
		Status: corev1.NodeStatus{
			// loopback: nothing ever gets sent to a made-up address
			Addresses:   []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: nodeName}},
			Allocatable: rl,
			Capacity:    rl,
			NodeInfo: corev1.NodeSystemInfo{
				Architecture:    "amd64",
				OperatingSystem: "linux",
				KubeletVersion:  "kwok-v0.8.0",
			},
		},
	}
	created, err := a.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	// status is ignored on create; set it through the status subresource
	created.Status = node.Status
	_, err = a.cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}
