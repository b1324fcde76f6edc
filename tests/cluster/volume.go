package main

// `volume`: lay ConfigMaps out in a directory exactly as the kubelet lays out
// a (projected) configMap volume, with the kubelet's own code (AtomicWriter:
// a timestamped directory, the `..data` link swapped atomically, one link
// per key), and keep it up to date as the ConfigMaps change. For tests that
// run a program as it would run in a pod, without a container runtime.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	volumeutil "k8s.io/kubernetes/pkg/volume/util"
)

func runVolume(args []string) int {
	fs := flag.NewFlagSet("volume", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig")
	namespace := fs.String("namespace", "default", "namespace of the ConfigMaps")
	names := fs.String("configmaps", "", "comma-separated ConfigMap names, projected into one directory; a name ending in ? is optional (skipped while it does not exist)")
	dir := fs.String("dir", "", "the volume directory (created if missing)")
	period := fs.Duration("period", time.Second, "how often the ConfigMaps are read (the kubelet's sync period)")
	mode := fs.Int("mode", 0o644, "file mode (the volume's defaultMode)")
	_ = fs.Parse(args)
	if *names == "" || *dir == "" {
		fmt.Fprintln(os.Stderr, "volume: --configmaps and --dir are required")
		return 2
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "volume:", err)
		return 1
	}
	admin, err := newAdminClient(*kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "volume:", err)
		return 1
	}
	writer, err := volumeutil.NewAtomicWriter(*dir, "configmap volume")
	if err != nil {
		fmt.Fprintln(os.Stderr, "volume:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	written := false
	for {
		payload, err := projection(ctx, admin, *namespace, strings.Split(*names, ","), int32(*mode))
		if err == nil {
			// Write only swaps `..data` when the content changed.
			err = writer.Write(payload, nil)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "volume:", err)
		} else if !written {
			written = true
			fmt.Println("VOLUME_READY=" + *dir)
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(*period):
		}
	}
}

// projection is what a projected volume of these ConfigMaps holds: every
// key of `data` and `binaryData`. A missing ConfigMap is an error, as for a
// non-optional source; one marked optional (`name?`) adds nothing until it
// exists, as the kubelet does.
func projection(ctx context.Context, admin *adminClient, namespace string, names []string, mode int32) (map[string]volumeutil.FileProjection, error) {
	payload := map[string]volumeutil.FileProjection{}
	for _, name := range names {
		name, optional := strings.CutSuffix(name, "?")
		cm, err := admin.cs.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && optional {
			continue
		}
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("configmap %s/%s not found", namespace, name)
		}
		if err != nil {
			return nil, err
		}
		for key, value := range cm.Data {
			payload[key] = volumeutil.FileProjection{Data: []byte(value), Mode: mode}
		}
		for key, value := range cm.BinaryData {
			payload[key] = volumeutil.FileProjection{Data: value, Mode: mode}
		}
	}
	return payload, nil
}
