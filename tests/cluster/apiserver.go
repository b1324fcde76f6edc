package main

// kube-apiserver from k8s.io/kubernetes, started in-process the way
// cmd/kube-apiserver/app/testing (StartTestServer) does it, but with the
// real command-line flags of a secured cluster. NewAPIServerCommand is not
// used because it installs process-wide signal handlers.

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/rest"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

func init() {
	// Several components in one process: don't let the second one fail
	// because the first one already applied the logging configuration.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
}

const (
	auditPolicyFile = "audit-policy.yaml"
	auditLogFile    = "audit.log"
	// The admission plugins' configuration: the API server presents the
	// client certificate of webhook-client.kubeconfig to every admission
	// webhook that asks for one (a host with --webhook-client-ca). It sends
	// none to conversion webhooks (kubernetes#131810).
	admissionConfigFile = "admission.yaml"
	webhookClientConfig = "webhook-client.kubeconfig"
)

// auditPolicy: one JSON line (level Metadata, stage ResponseComplete, or
// Panic) per write request of any user on any resource; reads and watches
// are not logged.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
`

func writeAuditPolicy(path string) error {
	return os.WriteFile(path, []byte(auditPolicy), 0o644)
}

// writeAdmissionConfig writes the admission configuration and the
// kubeconfig it names: the webhook client certificate for any webhook host
// (the "*" user).
func writeAdmissionConfig(p pkiPaths, dir string) error {
	kubeconfig := filepath.Join(dir, webhookClientConfig)
	users := fmt.Sprintf(`apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate: %s
    client-key: %s
`, p.WebhookClientCert, p.WebhookClientKey)
	if err := os.WriteFile(kubeconfig, []byte(users), 0o600); err != nil {
		return err
	}
	var plugins strings.Builder
	for _, name := range []string{"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"} {
		fmt.Fprintf(&plugins, `- name: %s
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %s
`, name, kubeconfig)
	}
	config := "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n" + plugins.String()
	return os.WriteFile(filepath.Join(dir, admissionConfigFile), []byte(config), 0o644)
}

func apiserverFlags(p pkiPaths, dir, etcdURL string, port int) []string {
	return []string{
		"--advertise-address=127.0.0.1",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--etcd-servers=" + etcdURL,
		"--tls-cert-file=" + p.ServingCert,
		"--tls-private-key-file=" + p.ServingKey,
		"--client-ca-file=" + p.CACert,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--admission-control-config-file=" + filepath.Join(dir, admissionConfigFile),
		"--allow-privileged=true",
		"--service-cluster-ip-range=" + serviceCIDR,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.SAPub,
		"--service-account-signing-key-file=" + p.SAKey,
		"--api-audiences=https://kubernetes.default.svc.cluster.local",
		// aggregation layer / front proxy
		"--requestheader-client-ca-file=" + p.FrontProxyCACert,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-uid-headers=X-Remote-Uid",
		"--proxy-client-cert-file=" + p.FrontProxyClientCert,
		"--proxy-client-key-file=" + p.FrontProxyClientKey,
		"--enable-aggregator-routing=false",
		// The lease reconciler would publish 127.0.0.1 as the endpoint of the
		// "kubernetes" Service, which Endpoints validation rejects (loopback),
		// logging an error every few seconds. The Service itself is still created.
		"--endpoint-reconciler-type=none",
		// no kubelets to talk to; keep it quick on 2 cores
		"--profiling=false",
		"--goaway-chance=0",
		"--event-ttl=1h",
		"--watch-cache=true",
		// audit: JSON lines written synchronously (blocking mode, no batching),
		// appended across restarts, capped at 200 MB + one 200 MB backup
		"--audit-policy-file=" + filepath.Join(dir, auditPolicyFile),
		"--audit-log-path=" + filepath.Join(dir, auditLogFile),
		"--audit-log-format=json",
		"--audit-log-mode=blocking",
		"--audit-log-maxsize=200",
		"--audit-log-maxbackup=1",
	}
}

// prepareAPIServer parses flags and builds the server chain; the returned
// function runs it until its context ends.
func prepareAPIServer(ctx context.Context, args []string, ln net.Listener) (func(context.Context) error, error) {
	s := options.NewServerRunOptions()
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, f := range s.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	s.SecureServing.Listener = ln
	s.SecureServing.BindPort = ln.Addr().(*net.TCPAddr).Port

	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, err
	}
	// kube-apiserver loopback clients should not log self-issued warnings
	// (this is process wide, as in the real binary).
	rest.SetDefaultWarningHandler(rest.NoWarnings{})

	completed, err := s.Complete(ctx)
	if err != nil {
		return nil, fmt.Errorf("complete options: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return nil, fmt.Errorf("validate options: %w", utilerrors.NewAggregate(errs))
	}
	fg := s.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	if mfg, ok := fg.(featuregate.MutableFeatureGate); ok {
		mfg.AddMetrics()
	} else {
		utilfeature.DefaultMutableFeatureGate.AddMetrics()
	}

	config, err := app.NewConfig(completed)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cc, err := config.Complete()
	if err != nil {
		return nil, fmt.Errorf("complete config: %w", err)
	}
	server, err := app.CreateServerChain(cc)
	if err != nil {
		return nil, fmt.Errorf("create server chain: %w", err)
	}
	prepared, err := server.PrepareRun()
	if err != nil {
		return nil, fmt.Errorf("prepare run: %w", err)
	}
	return func(ctx context.Context) error { return prepared.Run(ctx) }, nil
}
