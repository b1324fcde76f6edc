//! The `OTEL_*` variables the host reads itself: the ones the SDK and the
//! OTLP exporter leave to the application (whether to export at all), and
//! the ones the host's HTTP client must agree with the exporter on
//! (endpoint, protocol, timeout), handed to the exporter from here.
//!
//! The rest are read by the SDK and the exporter themselves:
//! `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`, `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER[_ARG]`, `OTEL_BSP_*`
//! and the span limits.
//!
//! Asking for what this build cannot do (gRPC, another exporter) is an
//! error at start, naming the variable: quietly exporting nothing would
//! leave someone looking for traces that never come.

use std::time::Duration;

/// The timeout of one export when no variable sets it (the spec's).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The encoding of OTLP/HTTP requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `http/protobuf`, the spec's default.
    Protobuf,
    /// `http/json`.
    Json,
}

impl Protocol {
    /// As `OTEL_EXPORTER_OTLP_PROTOCOL` names it.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Protobuf => "http/protobuf",
            Protocol::Json => "http/json",
        }
    }
}

/// What the environment asks of the exporter, when it asks for traces.
#[derive(Debug, PartialEq, Eq)]
pub struct Config {
    /// Where spans are sent: the traces endpoint as it is, or the base
    /// endpoint's `/v1/traces` (as the spec says).
    pub endpoint: String,
    pub protocol: Protocol,
    /// How long one export may take, retries included.
    pub timeout: Duration,
    /// `OTEL_SERVICE_NAME` or a `service.name` in `OTEL_RESOURCE_ATTRIBUTES`
    /// names the service; otherwise it is `kubeplug` (the SDK's own default,
    /// `unknown_service:kubeplug`, says less).
    pub names_service: bool,
}

/// An `OTEL_*` variable that asks for what this build cannot do.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// gRPC needs tonic, a second HTTP/2 stack: not built in.
    #[error(
        "{variable}=grpc: this build exports traces over OTLP/HTTP only; \
         set http/protobuf (the default) or http/json"
    )]
    Grpc { variable: &'static str },
    #[error("{variable}={value}: not an OTLP protocol (http/protobuf or http/json)")]
    Protocol {
        variable: &'static str,
        value: String,
    },
    #[error("OTEL_TRACES_EXPORTER={0}: this build exports traces over OTLP only (otlp or none)")]
    Exporter(String),
    #[error("{variable}={value}: not a timeout in milliseconds")]
    Timeout {
        variable: &'static str,
        value: String,
    },
}

/// The exporter's settings if the environment (`var`) asks for traces:
/// an endpoint is set, `OTEL_TRACES_EXPORTER` is not `none` and
/// `OTEL_SDK_DISABLED` is not `true`.
pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Option<Config>, ConfigError> {
    let var = |name: &str| var(name).filter(|value| !value.trim().is_empty());
    let endpoint = match (
        var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        var("OTEL_EXPORTER_OTLP_ENDPOINT"),
    ) {
        (Some(traces), _) => traces,
        (None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
        (None, None) => return Ok(None),
    };
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    if let Some(exporters) = var("OTEL_TRACES_EXPORTER") {
        let names: Vec<String> = exporters
            .split(',')
            .map(|name| name.trim().to_ascii_lowercase())
            .collect();
        if names.iter().any(|name| name == "none") {
            return Ok(None);
        }
        if names.iter().any(|name| name != "otlp") {
            return Err(ConfigError::Exporter(exporters));
        }
    }
    let protocol = match first(&var, PROTOCOL) {
        None => Protocol::Protobuf,
        Some((variable, value)) => match value.trim().to_ascii_lowercase().as_str() {
            "grpc" => return Err(ConfigError::Grpc { variable }),
            name => [Protocol::Protobuf, Protocol::Json]
                .into_iter()
                .find(|protocol| protocol.name() == name)
                .ok_or(ConfigError::Protocol { variable, value })?,
        },
    };
    let timeout = match first(&var, TIMEOUT) {
        None => DEFAULT_TIMEOUT,
        Some((variable, value)) => value
            .trim()
            .parse()
            .map(Duration::from_millis)
            .map_err(|_| ConfigError::Timeout { variable, value })?,
    };
    let names_service = var("OTEL_SERVICE_NAME").is_some()
        || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attributes| {
            attributes
                .split(',')
                .filter_map(|pair| pair.split_once('='))
                .any(|(key, _)| key.trim() == "service.name")
        });
    Ok(Some(Config {
        endpoint,
        protocol,
        timeout,
        names_service,
    }))
}

/// The protocol variables, the signal's first (as the spec orders them).
const PROTOCOL: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
];

/// The timeout variables, likewise.
const TIMEOUT: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
];

/// The first of `names` that is set, with its value.
fn first(
    var: &impl Fn(&str) -> Option<String>,
    names: [&'static str; 2],
) -> Option<(&'static str, String)> {
    names
        .into_iter()
        .find_map(|name| var(name).map(|value| (name, value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Result<Option<Config>, ConfigError> {
        from_env(|name| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        })
    }

    fn config(vars: &[(&str, &str)]) -> Config {
        env(vars).unwrap().expect("traces asked for")
    }

    const BASE: (&str, &str) = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/");

    #[test]
    fn without_an_endpoint_nothing_is_exported() {
        assert_eq!(env(&[]), Ok(None));
        assert_eq!(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "")]), Ok(None));
        assert_eq!(env(&[("OTEL_SERVICE_NAME", "ops")]), Ok(None));
    }

    #[test]
    fn an_endpoint_exports_protobuf_to_its_traces_path_within_ten_seconds() {
        assert_eq!(
            config(&[BASE]),
            Config {
                endpoint: "http://collector:4318/v1/traces".into(),
                protocol: Protocol::Protobuf,
                timeout: Duration::from_secs(10),
                names_service: false,
            }
        );
    }

    #[test]
    fn the_traces_endpoint_is_used_as_it_is_and_wins() {
        let traces = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://x/otlp");
        assert_eq!(config(&[traces]).endpoint, "https://x/otlp");
        assert_eq!(config(&[BASE, traces]).endpoint, "https://x/otlp");
    }

    #[test]
    fn the_sdk_switch_and_the_none_exporter_turn_export_off() {
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_SDK_DISABLED", "TRUE"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert_eq!(env(&[BASE, off]), Ok(None), "{off:?}");
        }
        assert!(config(&[BASE, ("OTEL_SDK_DISABLED", "false")]).protocol == Protocol::Protobuf);
        assert!(config(&[BASE, ("OTEL_TRACES_EXPORTER", "otlp")]).protocol == Protocol::Protobuf);
    }

    #[test]
    fn json_is_chosen_by_either_protocol_variable_the_signals_first() {
        let json = ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json");
        assert_eq!(config(&[BASE, json]).protocol, Protocol::Json);
        let proto = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf");
        assert_eq!(config(&[BASE, json, proto]).protocol, Protocol::Protobuf);
    }

    #[test]
    fn grpc_and_other_exporters_are_refused_by_name() {
        let grpc = env(&[BASE, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).unwrap_err();
        assert!(
            grpc.to_string()
                .contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc")
        );
        assert!(grpc.to_string().contains("http/protobuf"));
        assert_eq!(
            env(&[BASE, ("OTEL_TRACES_EXPORTER", "zipkin")]),
            Err(ConfigError::Exporter("zipkin".into()))
        );
        assert!(matches!(
            env(&[BASE, ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "thrift")]),
            Err(ConfigError::Protocol { .. })
        ));
    }

    #[test]
    fn timeouts_are_milliseconds_the_signals_first() {
        let all = ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500");
        assert_eq!(config(&[BASE, all]).timeout, Duration::from_millis(2500));
        let traces = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "300");
        assert_eq!(
            config(&[BASE, all, traces]).timeout,
            Duration::from_millis(300)
        );
        assert!(matches!(
            env(&[BASE, ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")]),
            Err(ConfigError::Timeout { .. })
        ));
    }

    #[test]
    fn the_service_is_named_by_its_variable_or_a_resource_attribute() {
        assert!(config(&[BASE, ("OTEL_SERVICE_NAME", "ops")]).names_service);
        let attributes = ("OTEL_RESOURCE_ATTRIBUTES", "team=a, service.name=ops");
        assert!(config(&[BASE, attributes]).names_service);
        let others = ("OTEL_RESOURCE_ATTRIBUTES", "service.namespace=a");
        assert!(!config(&[BASE, others]).names_service);
    }
}
