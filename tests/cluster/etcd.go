package main

// Embedded etcd (go.etcd.io/etcd/server/v3, the 3.6.x line that k8s 1.36 uses).

import (
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// startEtcd starts a single-member etcd on loopback and returns its client
// URL, the ports used and a stop function. With recorded ports (non-zero,
// from DIR/ports) it uses exactly those and fails clearly if one is taken.
// Otherwise ports are picked just before start; if one was taken in between,
// it retries with new ports.
func startEtcd(dir string, recorded clusterPorts, portsFile string) (string, int, int, func(), error) {
	fixed := recorded.EtcdClient != 0 && recorded.EtcdPeer != 0
	attempts := 5
	if fixed {
		attempts = 1
		if err := checkRecordedPort("etcd client", recorded.EtcdClient, portsFile); err != nil {
			return "", 0, 0, nil, err
		}
		if err := checkRecordedPort("etcd peer", recorded.EtcdPeer, portsFile); err != nil {
			return "", 0, 0, nil, err
		}
	}
	var lastErr error
	for attempt := 0; attempt < attempts; attempt++ {
		cport, pport := recorded.EtcdClient, recorded.EtcdPeer
		if !fixed {
			var err error
			if cport, err = freePort(); err != nil {
				return "", 0, 0, nil, err
			}
			if pport, err = freePort(); err != nil {
				return "", 0, 0, nil, err
			}
		}
		curl := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", cport)}
		purl := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", pport)}

		cfg := embed.NewConfig()
		cfg.Name = "kubeplug"
		cfg.Dir = dir
		cfg.ListenClientUrls = []url.URL{curl}
		cfg.AdvertiseClientUrls = []url.URL{curl}
		cfg.ListenPeerUrls = []url.URL{purl}
		cfg.AdvertisePeerUrls = []url.URL{purl}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		cfg.LogLevel = "error"
		cfg.LogOutputs = []string{"stderr"}
		// A test cluster: no fsync. Data survives the process being stopped
		// or killed (it is in the page cache), not a crash of the machine.
		cfg.UnsafeNoFsync = true
		cfg.QuotaBackendBytes = 2 << 30

		e, err := embed.StartEtcd(cfg)
		if err != nil {
			lastErr = err
			time.Sleep(100 * time.Millisecond)
			continue
		}
		select {
		case <-e.Server.ReadyNotify():
		case err := <-e.Err():
			e.Close()
			lastErr = err
			continue
		case <-time.After(60 * time.Second):
			e.Close()
			return "", 0, 0, nil, fmt.Errorf("etcd did not become ready within 60s")
		}
		stop := func() {
			// raft and the backend first: the data is written and closed
			// even if clients (an apiserver that did not stop in time)
			// still hold watch streams, which e.Close would wait for (~7s)
			e.Server.Stop()
			done := make(chan struct{})
			go func() {
				e.Close()
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(time.Second):
				logf("etcd: client connections still open after 1s; not waiting for them")
			}
		}
		return curl.String(), cport, pport, stop, nil
	}
	return "", 0, 0, nil, lastErr
}
