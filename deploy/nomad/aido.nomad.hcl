# An example, not a tested deployment: `aido serve` on every Nomad client node (a system job),
# one runtime per host, each with its own AIDO_HOME on the host (so its own
# service.instance.id), exporting OTLP to the node's collector agent.
#
# The fleet's bearer token lives in a Nomad Variable (nomad var put nomad/jobs/aido token=...)
# and is written to AIDO_HOME/serve/token (mode 0600) before aido starts; aido reuses a token
# file it finds. Mission Control (mission-control.nomad.hcl) needs the same token under its own
# job's path (nomad var put nomad/jobs/aido-fleet token=...): a job reads its own path.
# Templates that write outside the allocation need the client's
# `client { template { disable_file_sandbox = true } }`.
job "aido" {
  type        = "system"
  datacenters = ["*"]

  group "runtime" {
    network {
      port "http" {
        static = 7411
      }
    }

    service {
      name     = "aido"
      provider = "nomad"
      port     = "http"
      tags     = ["aido-serve"]
    }

    task "serve" {
      # aido drives QEMU and /dev/kvm on the host, and keeps its journal in AIDO_HOME.
      driver = "raw_exec"

      config {
        command = "/usr/local/bin/aido"
        args = [
          "serve",
          "--listen", "0.0.0.0:7411",
          "--allow-host", "${attr.unique.network.ip-address}",
          "--allow-host", "${attr.unique.network.ip-address}:7411",
        ]
      }

      env {
        AIDO_HOME                   = "/var/lib/aido"
        OTEL_EXPORTER_OTLP_ENDPOINT = "http://127.0.0.1:4318"
        OTEL_EXPORTER_OTLP_PROTOCOL = "http/protobuf"
      }

      template {
        data        = "{{ with nomadVar \"nomad/jobs/aido\" }}{{ .token }}{{ end }}\n"
        destination = "/var/lib/aido/serve/token"
        perms       = "0600"
        change_mode = "restart"
      }

      kill_signal  = "SIGTERM"
      kill_timeout = "10s"

      resources {
        cpu    = 2000
        memory = 2048
      }
    }
  }
}
