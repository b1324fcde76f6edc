package main

// Embedded etcd (go.etcd.io/etcd/server/v3, the 3.6.x line that k8s 1.36 uses).

import (
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// startEtcd starts a single-member etcd on free loopback ports and returns
// its client URL and a stop function. Ports are picked just before start;
// if one was taken in between, it retries with new ports.
func startEtcd(dir string) (string, func(), error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		cport, err := freePort()
		if err != nil {
			return "", nil, err
		}
		pport, err := freePort()
		if err != nil {
			return "", nil, err
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
		// A throwaway test cluster: durability is not needed, speed is.
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
			return "", nil, fmt.Errorf("etcd did not become ready within 60s")
		}
		return curl.String(), e.Close, nil
	}
	return "", nil, lastErr
}
