//! `kubeplug replay`: fetch a plugin's failure captures from a running
//! host's plain-HTTP listener (`/plugins/<plugin>/replays`), which serves
//! them to loopback clients only; a host in a pod is reached through a
//! port-forward to it (`--pod`, see [`super::forward`]).

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use kubeplug_operator::replay::{Capture, Summary};

/// Longest wait for the host's whole answer.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Longest error shown in the listing, in characters.
const ERROR_COLUMN: usize = 80;

#[derive(Args)]
pub struct ReplayArgs {
    /// The host's HTTP listener (its `--listen`); a host in a pod is
    /// reached with `--pod`.
    #[arg(
        long,
        env = "KUBEPLUG_REPLAY_FROM",
        default_value = "http://127.0.0.1:8080"
    )]
    from: String,
    /// The plugin's name (as in its manifest).
    plugin: String,
    /// The failing parent, `NAMESPACE/NAME` (or `NAME` when cluster-scoped):
    /// fetch its capture. Without it, list the captures.
    parent: Option<String>,
    /// Write the capture to FILE instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE", requires = "parent")]
    output: Option<PathBuf>,
    #[command(flatten)]
    pod: super::forward::PodArgs,
}

/// Why a capture could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{url} is not a plain-HTTP URL such as http://127.0.0.1:8080")]
    BadUrl { url: String },
    #[error(
        "cannot connect to {url}: is the host listening there? Replays are served to loopback clients only (reach a host in a pod with --pod)"
    )]
    Connect {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no answer from {url} within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
    #[error("the HTTP exchange with {url} failed")]
    Http {
        url: String,
        #[source]
        source: hyper::Error,
    },
    /// The host refused (403: not a loopback client) or has nothing (404);
    /// `message` is its own text.
    #[error("{url} answered {status}: {message}")]
    Status {
        url: String,
        status: u16,
        message: String,
    },
    #[error("{url} answered with something that is not what `kubeplug replay` expects")]
    Parse {
        url: String,
        #[source]
        source: serde_json::Error,
    },
}

/// The path of a plugin's replays, or of one parent's.
pub fn path(plugin: &str, parent: Option<&str>) -> String {
    match parent {
        None => format!("/plugins/{plugin}/replays"),
        Some(parent) => format!("/plugins/{plugin}/replays/{parent}"),
    }
}

/// GET `path` under `base` (`http://host:port[/prefix]`), within [`TIMEOUT`].
pub async fn get(base: &str, path: &str) -> Result<Bytes, FetchError> {
    let bad = || FetchError::BadUrl { url: base.into() };
    let uri: http::Uri = base.parse().map_err(|_| bad())?;
    if uri.scheme_str() != Some("http") {
        return Err(bad());
    }
    let authority = uri.authority().ok_or_else(bad)?.clone();
    let url = format!(
        "http://{authority}{}{path}",
        uri.path().trim_end_matches('/')
    );
    let target = format!("{}{path}", uri.path().trim_end_matches('/'));
    let address = match authority.port_u16() {
        Some(_) => authority.to_string(),
        None => format!("{authority}:80"),
    };
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(&address)
            .await
            .map_err(|source| FetchError::Connect {
                url: url.clone(),
                source,
            })?;
        let http = |source| FetchError::Http {
            url: url.clone(),
            source,
        };
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(http)?;
        tokio::spawn(connection);
        let request = hyper::Request::get(target.as_str())
            .header(hyper::header::HOST, authority.as_str())
            .header(hyper::header::ACCEPT, "application/json")
            .body(Empty::<Bytes>::new())
            .map_err(|_| bad())?;
        let response = sender.send_request(request).await.map_err(http)?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(http)?
            .to_bytes();
        if !status.is_success() {
            return Err(FetchError::Status {
                url: url.clone(),
                status: status.as_u16(),
                message: String::from_utf8_lossy(&body).trim().to_string(),
            });
        }
        Ok(body)
    };
    tokio::time::timeout(TIMEOUT, exchange)
        .await
        .map_err(|_| FetchError::Timeout {
            url: url.clone(),
            timeout: TIMEOUT,
        })?
}

fn parse<T: serde::de::DeserializeOwned>(url: String, body: &[u8]) -> Result<T, FetchError> {
    serde_json::from_slice(body).map_err(|source| FetchError::Parse { url, source })
}

/// The captures `plugin` keeps on the host at `base`, newest first.
pub async fn list(base: &str, plugin: &str) -> Result<Vec<Summary>, FetchError> {
    let path = path(plugin, None);
    parse(format!("{base}{path}"), &get(base, &path).await?)
}

/// The capture of `parent` (`namespace/name`) of `plugin`.
pub async fn capture(base: &str, plugin: &str, parent: &str) -> Result<Capture, FetchError> {
    let path = path(plugin, Some(parent));
    parse(format!("{base}{path}"), &get(base, &path).await?)
}

/// `text` cut to `max` characters, with an ellipsis if cut; one line.
fn truncated(text: &str, max: usize) -> String {
    let line = text.replace('\n', " ");
    match line.char_indices().nth(max.saturating_sub(1)) {
        Some((cut, _)) if line.chars().count() > max => format!("{}…", &line[..cut]),
        _ => line,
    }
}

/// The listing as a table.
pub fn table(summaries: &[Summary]) -> String {
    let rows: Vec<[String; 5]> = summaries
        .iter()
        .map(|s| {
            [
                s.parent.clone(),
                s.at.clone(),
                s.call.to_string(),
                s.reason.clone(),
                truncated(&s.error, ERROR_COLUMN),
            ]
        })
        .collect();
    let header = ["PARENT", "AT", "CALL", "REASON", "ERROR"].map(String::from);
    let mut widths = [0; 5];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}   ", width = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub fn replay_cmd(args: ReplayArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    let from = runtime.block_on(super::forward::base(&args.from, &args.pod, &args.plugin))?;
    let Some(parent) = &args.parent else {
        let summaries = runtime
            .block_on(list(&from, &args.plugin))
            .with_context(|| format!("cannot list the replays of plugin {}", args.plugin))?;
        if summaries.is_empty() {
            eprintln!("plugin {} has no failure kept", args.plugin);
        } else {
            print!("{}", table(&summaries));
        }
        return Ok(());
    };
    let capture = runtime
        .block_on(capture(&from, &args.plugin, parent))
        .with_context(|| {
            format!(
                "cannot fetch the replay of {parent} (plugin {})",
                args.plugin
            )
        })?;
    let yaml = kubeplug_core::yaml::to_string(&capture);
    let file = match &args.output {
        Some(path) => {
            std::fs::write(path, &yaml)
                .with_context(|| format!("cannot write {}", path.display()))?;
            path.display().to_string()
        }
        None => {
            std::io::stdout().write_all(yaml.as_bytes())?;
            "FILE".into()
        }
    };
    for line in &capture.redacted {
        eprintln!("redacted: {line}");
    }
    eprintln!(
        "reproduce with: kubeplug render --plugin {}.wasm --request {file}",
        capture.plugin
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeplug_operator::replay::Call;

    #[test]
    fn the_table_lines_up_and_cuts_long_errors() {
        let summary = |parent: &str, error: &str| Summary {
            parent: parent.into(),
            at: "2026-11-29T18:00:00.000Z".into(),
            call: Call::Reconcile,
            reason: "trap".into(),
            error: error.into(),
            bytes: 1,
        };
        let table = table(&[
            summary("default/a-long-name", &"é".repeat(200)),
            summary("b", "short\nline"),
        ]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        let column = lines[0].find("ERROR").unwrap();
        assert_eq!(lines[2].find("short line"), Some(column));
        assert!(lines[1].ends_with('…'));
        // The columns before ERROR are ASCII: byte and character offsets agree.
        assert_eq!(lines[1][column..].chars().count(), ERROR_COLUMN);
    }

    #[tokio::test]
    async fn a_refused_connection_names_the_url_and_the_loopback_rule() {
        // Bind then drop: the port is (almost certainly) closed now.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let base = format!("http://{addr}");
        let error = list(&base, "database").await.unwrap_err();
        let text = error.to_string();
        assert!(matches!(error, FetchError::Connect { .. }), "{text}");
        assert!(
            text.contains(&format!("{base}/plugins/database/replays")),
            "{text}"
        );
        assert!(text.contains("loopback"), "{text}");
    }

    #[tokio::test]
    async fn urls_other_than_plain_http_are_refused() {
        for url in ["https://127.0.0.1:8080", "127.0.0.1:8080", "not a url"] {
            assert!(
                matches!(get(url, "/x").await, Err(FetchError::BadUrl { .. })),
                "{url}"
            );
        }
    }
}
