package main

// kube-controller-manager and kube-scheduler from k8s.io/kubernetes, started
// in-process like their app/testing StartTestServer helpers do, with real flags.

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	schedapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedoptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

func prepareKCM(ctx context.Context, args []string) (func(context.Context) error, error) {
	s, err := kcmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return nil, err
	}
	all, disabled, aliases := kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases()
	nfs := s.Flags(all, disabled, aliases)
	fs := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	for _, f := range nfs.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	s.ParsedFlags = &nfs
	c, err := s.Config(ctx, all, disabled, aliases)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	completed := c.Complete()
	return func(ctx context.Context) error { return kcmapp.Run(ctx, completed) }, nil
}

func prepareScheduler(_ context.Context, args []string) (func(context.Context) error, error) {
	opts := schedoptions.NewOptions()
	fs := pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)
	for _, f := range opts.Flags.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	// Setup ties the scheduler's informers to its context, so it runs
	// inside the component's own context.
	return func(ctx context.Context) error {
		cc, sched, err := schedapp.Setup(ctx, opts)
		if err != nil {
			return fmt.Errorf("setup: %w", err)
		}
		return schedapp.Run(ctx, cc, sched)
	}, nil
}
