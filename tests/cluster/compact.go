package main

// `kubeplug-cluster compact --dir DIR`: compact the running cluster's etcd
// up to its current revision, so that a watch resumed from an older
// resourceVersion (once the API server's watch cache no longer holds it, e.g.
// after a restart) gets 410 Gone, as after etcd's periodic compaction in a
// real cluster. Prints the revision compacted to.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func runCompact(args []string) int {
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	dir := fs.String("dir", "", "cluster directory (from tests/cluster/up)")
	if err := fs.Parse(args); err != nil || *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: kubeplug-cluster compact --dir DIR")
		return 2
	}
	ports, ok, err := readPorts(filepath.Join(*dir, "ports"))
	if err != nil || !ok {
		fmt.Fprintf(os.Stderr, "compact: no recorded ports in %s: %v\n", *dir, err)
		return 1
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{fmt.Sprintf("http://127.0.0.1:%d", ports.EtcdClient)},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "compact: connect to etcd: %v\n", err)
		return 1
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Any read returns the current revision in its header.
	status, err := client.Get(ctx, "compact-probe")
	if err != nil {
		fmt.Fprintf(os.Stderr, "compact: read the revision: %v\n", err)
		return 1
	}
	revision := status.Header.Revision
	if _, err := client.Compact(ctx, revision, clientv3.WithCompactPhysical()); err != nil {
		fmt.Fprintf(os.Stderr, "compact: %v\n", err)
		return 1
	}
	fmt.Println(revision)
	return 0
}
