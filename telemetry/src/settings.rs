//! Where and how to export: `[telemetry]` in aido's config, with the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_PROTOCOL` used where it says nothing.

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_otlp::{LogExporter, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::logs::{BatchLogProcessor, SdkLoggerProvider};
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider};

use crate::StartError;

/// The OTLP wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/HTTP with protobuf bodies (`/v1/traces`, `/v1/metrics`, `/v1/logs`; port 4318).
    HttpProtobuf,
    /// OTLP/gRPC (port 4317).
    Grpc,
}

impl Protocol {
    /// `http/protobuf` or `grpc`, as `OTEL_EXPORTER_OTLP_PROTOCOL` names them.
    pub fn parse(name: &str) -> Result<Self, StartError> {
        match name {
            "" | "http/protobuf" => Ok(Self::HttpProtobuf),
            "grpc" => Ok(Self::Grpc),
            other => Err(StartError::Protocol(other.to_owned())),
        }
    }
}

/// OTLP export.
#[derive(Clone, Debug)]
pub struct Otlp {
    /// The collector's base URL (`http://127.0.0.1:4318`); HTTP adds `/v1/<signal>`.
    pub endpoint: String,
    /// The wire.
    pub protocol: Protocol,
    /// How often batches of spans and log records, and metric points, are sent.
    pub interval: Duration,
}

/// What telemetry does.
#[derive(Clone, Debug)]
pub struct Settings {
    /// OTLP export, or none.
    pub otlp: Option<Otlp>,
    /// Whether metrics are kept for a Prometheus scrape.
    pub prometheus: bool,
    /// `service.instance.id`.
    pub instance: String,
}

/// How often OTLP batches go out unless the config says otherwise.
pub const EXPORT_INTERVAL_MS: u64 = 2_000;

impl Settings {
    /// From `[telemetry]`; `env` reads an environment variable (`std::env::var` in aido).
    pub fn from_config(
        config: &aido_policy::config::Telemetry,
        env: impl Fn(&str) -> Option<String>,
        instance: String,
    ) -> Result<Self, StartError> {
        let endpoint = Some(config.otlp_endpoint.trim().to_owned())
            .filter(|e| !e.is_empty())
            .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT").filter(|e| !e.trim().is_empty()));
        let protocol = if config.otlp_protocol.is_empty() {
            Protocol::parse(env("OTEL_EXPORTER_OTLP_PROTOCOL").as_deref().unwrap_or(""))?
        } else {
            Protocol::parse(&config.otlp_protocol)?
        };
        Ok(Self {
            otlp: endpoint.map(|endpoint| Otlp {
                endpoint: endpoint.trim().trim_end_matches('/').to_owned(),
                protocol,
                interval: Duration::from_millis(EXPORT_INTERVAL_MS),
            }),
            prometheus: config.prometheus,
            instance,
        })
    }

    /// The resource every signal carries.
    pub(crate) fn resource(&self) -> Resource {
        Resource::builder_empty()
            .with_service_name("aido")
            .with_attributes([
                KeyValue::new("service.version", aido_actors::runtime::VERSION),
                KeyValue::new("service.instance.id", self.instance.clone()),
            ])
            .build()
    }
}

impl Otlp {
    /// The URL of `signal` (`traces`, ...) for HTTP, the base for gRPC.
    pub(crate) fn url(&self, signal: &str) -> String {
        match self.protocol {
            Protocol::HttpProtobuf => format!("{}/v1/{signal}", self.endpoint),
            Protocol::Grpc => self.endpoint.clone(),
        }
    }

    pub(crate) fn tracer_provider(
        &self,
        resource: Resource,
    ) -> Result<SdkTracerProvider, StartError> {
        let builder = SpanExporter::builder();
        let exporter = match self.protocol {
            Protocol::HttpProtobuf => builder
                .with_http()
                .with_endpoint(self.url("traces"))
                .build(),
            Protocol::Grpc => builder
                .with_tonic()
                .with_endpoint(self.url("traces"))
                .build(),
        }
        .map_err(|e| StartError::Exporter {
            signal: "span",
            why: e.to_string(),
        })?;
        let config = opentelemetry_sdk::trace::BatchConfigBuilder::default()
            .with_scheduled_delay(self.interval)
            .build();
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(config)
            .build();
        Ok(SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource)
            .build())
    }

    pub(crate) fn logger_provider(
        &self,
        resource: Resource,
    ) -> Result<SdkLoggerProvider, StartError> {
        let builder = LogExporter::builder();
        let exporter = match self.protocol {
            Protocol::HttpProtobuf => builder.with_http().with_endpoint(self.url("logs")).build(),
            Protocol::Grpc => builder.with_tonic().with_endpoint(self.url("logs")).build(),
        }
        .map_err(|e| StartError::Exporter {
            signal: "log",
            why: e.to_string(),
        })?;
        let config = opentelemetry_sdk::logs::BatchConfigBuilder::default()
            .with_scheduled_delay(self.interval)
            .build();
        let processor = BatchLogProcessor::builder(exporter)
            .with_batch_config(config)
            .build();
        Ok(SdkLoggerProvider::builder()
            .with_log_processor(processor)
            .with_resource(resource)
            .build())
    }

    pub(crate) fn metric_exporter(&self) -> Result<opentelemetry_otlp::MetricExporter, StartError> {
        let builder = opentelemetry_otlp::MetricExporter::builder();
        match self.protocol {
            Protocol::HttpProtobuf => builder
                .with_http()
                .with_endpoint(self.url("metrics"))
                .build(),
            Protocol::Grpc => builder
                .with_tonic()
                .with_endpoint(self.url("metrics"))
                .build(),
        }
        .map_err(|e| StartError::Exporter {
            signal: "metric",
            why: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(endpoint: &str, protocol: &str) -> aido_policy::config::Telemetry {
        aido_policy::config::Telemetry {
            otlp_endpoint: endpoint.into(),
            otlp_protocol: protocol.into(),
            prometheus: true,
            metrics_listen: String::new(),
        }
    }

    #[test]
    fn the_config_wins_and_the_environment_fills_in() {
        let env = |k: &str| match k {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://collector:4317/".into()),
            "OTEL_EXPORTER_OTLP_PROTOCOL" => Some("grpc".into()),
            _ => None,
        };
        let s = Settings::from_config(&config("", ""), env, "i".into()).unwrap();
        let otlp = s.otlp.unwrap();
        assert_eq!(otlp.endpoint, "http://collector:4317");
        assert_eq!(otlp.protocol, Protocol::Grpc);
        let s = Settings::from_config(
            &config("http://here:4318", "http/protobuf"),
            env,
            "i".into(),
        )
        .unwrap();
        let otlp = s.otlp.unwrap();
        assert_eq!(otlp.url("traces"), "http://here:4318/v1/traces");
        assert_eq!(otlp.protocol, Protocol::HttpProtobuf);
    }

    #[test]
    fn off_without_an_endpoint_and_a_bad_protocol_is_coded() {
        let s = Settings::from_config(&config("", ""), |_| None, "i".into()).unwrap();
        assert!(s.otlp.is_none());
        let err =
            Settings::from_config(&config("", "http/json"), |_| None, "i".into()).unwrap_err();
        assert_eq!(err.code(), "telemetry_protocol_unknown");
    }
}
