package main

// Simulated nodes: kwok's controllers (sigs.k8s.io/kwok/pkg/kwok/controllers)
// used as a library, with kwok's stock "fast" node and pod stages: nodes get
// Ready and keep a Lease, scheduled pods become Running+Ready with a pod IP,
// and pods with a deletionTimestamp are removed.

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeatwithlease "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
	"sigs.k8s.io/kwok/pkg/apis/internalversion"
	"sigs.k8s.io/kwok/pkg/client/clientset/versioned"
	"sigs.k8s.io/kwok/pkg/config"
	"sigs.k8s.io/kwok/pkg/kwok/controllers"
	kwokclient "sigs.k8s.io/kwok/pkg/utils/client"
)

func kwokStages() (map[internalversion.StageResourceRef][]*internalversion.Stage, error) {
	raw := []string{
		nodefast.DefaultNodeInit,
		nodeheartbeatwithlease.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	}
	out := map[internalversion.StageResourceRef][]*internalversion.Stage{}
	for _, r := range raw {
		s, err := config.UnmarshalWithType[*internalversion.Stage](r)
		if err != nil {
			return nil, err
		}
		out[s.Spec.ResourceRef] = append(out[s.Spec.ResourceRef], s)
	}
	return out, nil
}

func prepareKwok(_ context.Context, kubeconfig string) (func(context.Context) error, error) {
	stages, err := kwokStages()
	if err != nil {
		return nil, fmt.Errorf("stages: %w", err)
	}
	cs, err := kwokclient.NewClientset("", kubeconfig)
	if err != nil {
		return nil, err
	}
	restConfig, err := cs.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	dynamicClient, err := cs.ToDynamicClient()
	if err != nil {
		return nil, err
	}
	restClient, err := rest.RESTClientFor(restConfig)
	if err != nil {
		return nil, err
	}
	typedClient, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, err
	}
	typedKwokClient, err := versioned.NewForConfig(restConfig)
	if err != nil {
		return nil, err
	}
	id, err := controllers.Identity()
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		// the REST mapper uses discovery, so build it once the apiserver answers
		restMapper, err := cs.ToRESTMapper()
		if err != nil {
			return err
		}
		ctr, err := controllers.NewController(controllers.Config{
			Clock:                         clock.RealClock{},
			DynamicClient:                 dynamicClient,
			RESTClient:                    restClient,
			RESTMapper:                    restMapper,
			ImpersonatingDynamicClient:    cs.ToImpersonatingDynamicClient(),
			ImpersonatingTypedClient:      cs.ToImpersonatingTypedClient(),
			TypedClient:                   typedClient,
			TypedKwokClient:               typedKwokClient,
			ManageAllNodes:                true,
			CIDR:                          "10.244.0.0/16",
			NodeIP:                        "127.0.0.1",
			LocalStages:                   stages,
			PodPlayStageParallelism:       4,
			NodePlayStageParallelism:      4,
			NodeLeaseParallelism:          4,
			NodeLeaseDurationSeconds:      40,
			PodsOnNodeSyncParallelism:     1,
			EnablePodsOnNodeSyncListPager: true,
			ID:                            id,
		})
		if err != nil {
			return err
		}
		if err := ctr.Start(ctx); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}, nil
}
