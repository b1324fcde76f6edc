//! Reaching a host's plain-HTTP listener inside its pod, as `kubectl
//! port-forward` does, for `replay` and `whatif`: the host serves failure
//! captures and previews' details to loopback clients only, and a
//! port-forward arrives on the pod's loopback.
//!
//! A listener on this machine's loopback forwards each connection through
//! the API server (the pod's `portforward` subresource, which needs
//! `create pods/portforward` in the pod's namespace), so the commands speak
//! plain HTTP to `http://127.0.0.1:<port>` as they do to a host run by hand.

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;

use crate::args::ClusterArgs;

/// The label the host's pods carry (`deploy/base/deployment.yaml`).
const HOST_LABEL: &str = "app.kubernetes.io/name=kubeplug";

/// Where to reach a host running in a cluster.
#[derive(Args, Clone)]
pub struct PodArgs {
    /// Reach the host in its pod through the API server (a port-forward)
    /// instead of `--from`: the pod holding the plugin's Lease (the one
    /// that reconciles it), else the one running host pod; or POD.
    #[arg(
        long,
        value_name = "POD",
        num_args = 0..=1,
        default_missing_value = "",
        conflicts_with = "from"
    )]
    pub pod: Option<String>,
    /// Namespace of the host's pods and Leases.
    #[arg(
        short,
        long,
        env = "KUBEPLUG_NAMESPACE",
        default_value = "kubeplug-system"
    )]
    pub namespace: String,
    /// The host's `--listen` port inside its pod.
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// The base URL `--from` or `--pod` give: `from` itself, or a local
/// forward to the host's pod for `plugin`, kept open while `runtime` runs.
pub async fn base(from: &str, pod: &PodArgs, plugin: &str) -> anyhow::Result<String> {
    let Some(named) = &pod.pod else {
        return Ok(from.to_string());
    };
    let client = pod.cluster.client().await?;
    let name = match named.as_str() {
        "" => host_pod(&client, &pod.namespace, plugin).await?,
        name => name.to_string(),
    };
    forward(client, &pod.namespace, &name, pod.port).await
}

/// The pod that leads `plugin` (its Lease's holder, whose identity is the
/// pod's name and the process id), else the only running host pod.
async fn host_pod(client: &kube::Client, namespace: &str, plugin: &str) -> anyhow::Result<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease_name = kubeplug_kube::leader::lease_name(plugin);
    let holder = leases
        .get_opt(&lease_name)
        .await
        .with_context(|| format!("cannot read Lease {namespace}/{lease_name}"))?
        .and_then(|lease| lease.spec?.holder_identity);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let running: Vec<String> = pods
        .list(&ListParams::default().labels(HOST_LABEL))
        .await
        .with_context(|| format!("cannot list the host's pods in {namespace}"))?
        .into_iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|p| p.metadata.name)
        .collect();
    if let Some(holder) = holder
        && let Some(pod) = running.iter().find(|pod| holds(&holder, pod))
    {
        return Ok(pod.clone());
    }
    match running.as_slice() {
        [one] => Ok(one.clone()),
        [] => anyhow::bail!("no running pod labelled {HOST_LABEL} in {namespace}"),
        many => anyhow::bail!(
            "no pod of {} holds Lease {namespace}/{lease_name}: name one with --pod",
            many.join(", ")
        ),
    }
}

/// Does Lease holder `identity` (`<pod>-<pid>`) name `pod`?
fn holds(identity: &str, pod: &str) -> bool {
    identity
        .strip_prefix(pod)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// Listen on a free loopback port and forward every connection to `port`
/// of pod `namespace/name`; returns `http://127.0.0.1:<local port>`.
async fn forward(
    client: kube::Client,
    namespace: &str,
    name: &str,
    port: u16,
) -> anyhow::Result<String> {
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    pods.get(name)
        .await
        .with_context(|| format!("cannot find pod {namespace}/{name}"))?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .context("cannot listen on loopback for the port-forward")?;
    let local = listener.local_addr()?;
    let (namespace, name) = (namespace.to_string(), name.to_string());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let pods = pods.clone();
            let (namespace, name) = (namespace.clone(), name.clone());
            tokio::spawn(async move {
                let result = async {
                    let mut forwarder = pods.portforward(&name, &[port]).await?;
                    let mut upstream = forwarder
                        .take_stream(port)
                        .context("the port-forward gave no stream")?;
                    tokio::io::copy_bidirectional(&mut socket, &mut upstream).await?;
                    drop(upstream);
                    forwarder.join().await?;
                    anyhow::Ok(())
                }
                .await;
                if let Err(error) = result {
                    eprintln!("error: port-forward to {namespace}/{name}:{port}: {error:#}");
                }
            });
        }
    });
    Ok(format!("http://{local}"))
}

#[cfg(test)]
mod tests {
    use super::holds;

    #[test]
    fn a_lease_holder_names_its_pod_and_process() {
        assert!(holds("kubeplug-7d9f-abcde-12", "kubeplug-7d9f-abcde"));
        assert!(!holds("kubeplug-7d9f-abcde-12", "kubeplug-7d9f"));
        assert!(!holds("kubeplug-7d9f-abcde", "kubeplug-7d9f-abcde"));
        assert!(!holds("kubeplug-7d9f-abcdex-12", "kubeplug-7d9f-abcde"));
    }
}
