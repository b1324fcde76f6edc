// Command kubeplug-cluster runs a local Kubernetes control plane for tests:
// embedded etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
// kwok's node/pod controllers (simulated nodes), all in one process, on
// loopback ports. Invoked as "kubectl" (argv[0] basename) or with the first
// argument "kubectl" it acts as kubectl instead (busybox style).
//
// Usage:
//
//	kubeplug-cluster serve --dir DIR [--v N]
//	kubeplug-cluster proxy --dir DIR [--name NAME] [--listen ADDR] [--control ADDR] [--faults QUERY]
//	kubeplug-cluster kubectl ARGS...   (or via a symlink named kubectl)
package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

const (
	serviceCIDR = "10.96.0.0/16"
	serviceIP   = "10.96.0.1"
	podCIDR     = "10.244.0.0/16"
	nodeName    = "kwok-node-0"
)

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func main() {
	if filepath.Base(os.Args[0]) == "kubectl" {
		runKubectl(os.Args)
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "kubectl" {
		runKubectl(append([]string{"kubectl"}, os.Args[2:]...))
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		os.Exit(serve(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "proxy" {
		os.Exit(runProxy(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "volume" {
		os.Exit(runVolume(os.Args[2:]))
	}
	fmt.Fprintf(os.Stderr, "usage: %s serve --dir DIR [--v N] | proxy --dir DIR [flags] | volume [flags] | kubectl ARGS...\n", filepath.Base(os.Args[0]))
	os.Exit(2)
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s kubeplug-cluster: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// component is a started part of the control plane.
type component struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	// how long shutdown waits for it (default 20s)
	stopTimeout time.Duration
}

func start(parent context.Context, name string, fatal chan<- error, run func(ctx context.Context) error) *component {
	ctx, cancel := context.WithCancel(parent)
	c := &component{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		err := run(ctx)
		if ctx.Err() == nil {
			if err == nil {
				err = errors.New("exited")
			}
			select {
			case fatal <- fmt.Errorf("%s: %w", name, err):
			default:
			}
		}
	}()
	return c
}

func (c *component) stop(timeout time.Duration) {
	t := time.Now()
	c.cancel()
	select {
	case <-c.done:
		logf("%s stopped in %s", c.name, time.Since(t).Round(time.Millisecond))
	case <-time.After(timeout):
		logf("%s did not stop within %s; going on", c.name, timeout)
	}
}

func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	dir := fs.String("dir", "", "data directory (kubeconfig, pki, etcd data, markers)")
	verbosity := fs.Int("v", 0, "klog verbosity of the components")
	readyTimeout := fs.Duration("ready-timeout", 170*time.Second, "give up if not ready by then")
	_ = fs.Parse(args)
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "--dir is required")
		return 2
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*dir = abs
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = os.Remove(filepath.Join(*dir, "ready"))
	_ = os.Remove(filepath.Join(*dir, "failed"))
	_ = os.Remove(filepath.Join(*dir, "stopping"))

	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	_ = klogFlags.Set("v", strconv.Itoa(*verbosity))
	_ = klogFlags.Set("logtostderr", "true")

	fail := func(err error) int {
		logf("FAILED: %v", err)
		_ = os.WriteFile(filepath.Join(*dir, "failed"), []byte(err.Error()+"\n"), 0o644)
		return 1
	}

	ctx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()
	t0 := time.Now()

	p := newPKIPaths(filepath.Join(*dir, "pki"))
	if err := ensurePKI(p); err != nil {
		return fail(fmt.Errorf("pki: %w", err))
	}
	logf("pki ready in %s", time.Since(t0).Round(time.Millisecond))

	fatal := make(chan error, 8)
	var started []*component
	var stopOnce sync.Once
	shutdown := func() {
		stopOnce.Do(func() {
			logf("shutting down")
			// not ready any more; `up` on this dir waits for the exit, then restarts
			_ = os.WriteFile(filepath.Join(*dir, "stopping"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
			_ = os.Remove(filepath.Join(*dir, "ready"))
			// reverse order: nodes, scheduler, controllers, apiserver, etcd
			for i := len(started) - 1; i >= 0; i-- {
				t := started[i].stopTimeout
				if t == 0 {
					t = 20 * time.Second
				}
				started[i].stop(t)
			}
			logf("stopped")
		})
	}
	defer shutdown()

	// Ports: picked on the first start of this dir and recorded in DIR/ports;
	// later starts (after `down --keep` or a kill) reuse them or fail clearly.
	portsFile := filepath.Join(*dir, "ports")
	ports, havePorts, err := readPorts(portsFile)
	if err != nil {
		return fail(err)
	}

	// kube-apiserver listener first: fail fast if the recorded port is taken
	var ln net.Listener
	if havePorts {
		ln, err = listenRecorded("kube-apiserver", ports.APIServer, portsFile)
	} else {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return fail(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	server := fmt.Sprintf("https://127.0.0.1:%d", port)

	// etcd (recorded ports, or zero: pick free ones)
	etcdURL, etcdClientPort, etcdPeerPort, etcdStop, err := startEtcd(filepath.Join(*dir, "etcd"), ports, portsFile)
	if err != nil {
		_ = ln.Close()
		return fail(fmt.Errorf("etcd: %w", err))
	}
	started = append(started, &component{name: "etcd", cancel: func() { etcdStop() }, done: closedChan()})
	logf("etcd ready at %s in %s", etcdURL, time.Since(t0).Round(time.Millisecond))
	if !havePorts {
		ports = clusterPorts{APIServer: port, EtcdClient: etcdClientPort, EtcdPeer: etcdPeerPort}
		if err := writePorts(portsFile, ports); err != nil {
			_ = ln.Close()
			return fail(err)
		}
		logf("ports recorded in %s: apiserver %d, etcd client %d, etcd peer %d", portsFile, port, etcdClientPort, etcdPeerPort)
	} else {
		logf("reusing the ports recorded in %s: apiserver %d, etcd client %d, etcd peer %d", portsFile, port, etcdClientPort, etcdPeerPort)
	}

	// kube-apiserver
	if err := writeAuditPolicy(filepath.Join(*dir, auditPolicyFile)); err != nil {
		_ = ln.Close()
		return fail(err)
	}
	if err := writeAdmissionConfig(p, *dir); err != nil {
		_ = ln.Close()
		return fail(err)
	}
	apiserverArgs := apiserverFlags(p, *dir, etcdURL, port)
	_ = os.WriteFile(filepath.Join(*dir, "apiserver.flags"), []byte(strings.Join(apiserverArgs, "\n")+"\n"), 0o644)
	apiRun, err := prepareAPIServer(ctx, apiserverArgs, ln)
	if err != nil {
		_ = ln.Close()
		return fail(fmt.Errorf("kube-apiserver: %w", err))
	}
	apiComponent := start(context.Background(), "kube-apiserver", fatal, apiRun)
	// kube-apiserver's HTTP server waits up to --request-timeout (60s) for open
	// watches of outside clients to end; don't: after 2s (in-flight requests
	// are drained by then) etcd is closed and the process exits, which ends
	// the watches as a crash would.
	apiComponent.stopTimeout = 2 * time.Second
	started = append(started, apiComponent)

	kubeconfig := filepath.Join(*dir, "kubeconfig")
	if err := writeKubeconfig(kubeconfig, server, p.CACert, p.AdminCert, p.AdminKey, "kubeplug-admin"); err != nil {
		return fail(err)
	}
	kcmKubeconfig := filepath.Join(p.Dir, "controller-manager.kubeconfig")
	if err := writeKubeconfig(kcmKubeconfig, server, p.CACert, p.KCMCert, p.KCMKey, "system:kube-controller-manager"); err != nil {
		return fail(err)
	}
	schedKubeconfig := filepath.Join(p.Dir, "scheduler.kubeconfig")
	if err := writeKubeconfig(schedKubeconfig, server, p.CACert, p.SchedulerCert, p.SchedulerKey, "system:kube-scheduler"); err != nil {
		return fail(err)
	}

	admin, err := newAdminClient(kubeconfig)
	if err != nil {
		return fail(err)
	}
	waitCtx, cancelWait := context.WithTimeout(ctx, *readyTimeout)
	defer cancelWait()
	if err := waitFor(waitCtx, fatal, "apiserver /healthz", func(c context.Context) (bool, error) { return admin.healthy(c, "/healthz") }); err != nil {
		return fail(err)
	}
	logf("kube-apiserver healthy at %s in %s", server, time.Since(t0).Round(time.Millisecond))

	// kube-controller-manager
	kcmArgs := []string{
		"--kubeconfig=" + kcmKubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers=*",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + p.SAKey,
		"--root-ca-file=" + p.CACert,
		"--cluster-signing-cert-file=" + p.CACert,
		"--cluster-signing-key-file=" + p.CAKey,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--cluster-cidr=" + podCIDR,
		"--allocate-node-cidrs=false",
		"--kube-api-qps=200",
		"--kube-api-burst=400",
	}
	kcmRun, err := prepareKCM(ctx, kcmArgs)
	if err != nil {
		return fail(fmt.Errorf("kube-controller-manager: %w", err))
	}
	started = append(started, start(context.Background(), "kube-controller-manager", fatal, kcmRun))

	// kube-scheduler
	schedArgs := []string{
		"--kubeconfig=" + schedKubeconfig,
		"--authentication-kubeconfig=" + schedKubeconfig,
		"--authorization-kubeconfig=" + schedKubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
	}
	schedRun, err := prepareScheduler(ctx, schedArgs)
	if err != nil {
		return fail(fmt.Errorf("kube-scheduler: %w", err))
	}
	started = append(started, start(context.Background(), "kube-scheduler", fatal, schedRun))

	// simulated node (kwok), without the node lease a previous run on the
	// same data left (see dropNodeLease)
	if err := waitFor(waitCtx, fatal, "the stale node lease to go", func(c context.Context) (bool, error) { return true, admin.dropNodeLease(c) }); err != nil {
		return fail(err)
	}
	kwokRun, err := prepareKwok(ctx, kubeconfig)
	if err != nil {
		return fail(fmt.Errorf("kwok: %w", err))
	}
	started = append(started, start(context.Background(), "kwok", fatal, kwokRun))
	if err := waitFor(waitCtx, fatal, "node "+nodeName, func(c context.Context) (bool, error) { return true, admin.ensureNode(c) }); err != nil {
		return fail(err)
	}

	// ready: /readyz, namespace + ServiceAccount "default", a Ready node
	checks := []struct {
		what string
		fn   func(context.Context) (bool, error)
	}{
		{"apiserver /readyz", func(c context.Context) (bool, error) { return admin.healthy(c, "/readyz") }},
		{"namespace default", admin.namespaceReady},
		{"serviceaccount default/default", admin.defaultSAReady},
		{"a Ready node", admin.nodeReady},
	}
	for _, c := range checks {
		if err := waitFor(waitCtx, fatal, c.what, c.fn); err != nil {
			return fail(err)
		}
	}
	elapsed := time.Since(t0)
	logf("cluster ready in %s (pid %d, apiserver %s)", elapsed.Round(time.Millisecond), os.Getpid(), server)
	ready := fmt.Sprintf("server=%s\npid=%d\nstartup_seconds=%.2f\n", server, os.Getpid(), elapsed.Seconds())
	if err := os.WriteFile(filepath.Join(*dir, "ready.tmp"), []byte(ready), 0o644); err != nil {
		return fail(err)
	}
	if err := os.Rename(filepath.Join(*dir, "ready.tmp"), filepath.Join(*dir, "ready")); err != nil {
		return fail(err)
	}

	select {
	case <-ctx.Done():
		logf("signal received")
		shutdown()
		return 0
	case err := <-fatal:
		logf("component failed: %v", err)
		_ = os.WriteFile(filepath.Join(*dir, "failed"), []byte(err.Error()+"\n"), 0o644)
		shutdown()
		return 1
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// waitFor polls fn every 100ms until it reports true, the context ends, or a component fails.
func waitFor(ctx context.Context, fatal chan error, what string, fn func(context.Context) (bool, error)) error {
	var last error
	for {
		select {
		case err := <-fatal:
			return fmt.Errorf("while waiting for %s: %w", what, err)
		default:
		}
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		ok, err := fn(c)
		cancel()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("timed out waiting for %s (last error: %v)", what, last)
			}
			return fmt.Errorf("timed out waiting for %s", what)
		case err := <-fatal:
			return fmt.Errorf("while waiting for %s: %w", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
