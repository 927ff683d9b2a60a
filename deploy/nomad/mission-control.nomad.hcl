# An example, not a tested deployment: the discovery file of the runtime that serves Mission
# Control, kept by Nomad from the `aido` services (aido.nomad.hcl). aido re-reads it on every
# look, so the template changes nothing but the file (change_mode = "noop").
#
# Its token is the fleet's, stored under this job's path: nomad var put nomad/jobs/aido-fleet
# token=... (the same value as nomad/jobs/aido). Templates that write outside the allocation
# need the client's `client { template { disable_file_sandbox = true } }`.
#
# Run this task on the node whose runtime serves Mission Control, and point that runtime's
# config at the file:
#   [fleet]
#   discovery = "/var/lib/aido-fleet/peers.jsonl"
job "aido-fleet" {
  type        = "service"
  datacenters = ["*"]

  group "discovery" {
    count = 1

    task "peers" {
      driver = "raw_exec"

      config {
        # Nothing to run: the templates are the work. Sleep keeps the allocation alive.
        command = "/bin/sleep"
        args    = ["infinity"]
      }

      # One JSON line per runtime; every runtime has the fleet's token (the same Variable).
      template {
        data        = <<EOT
{{- range nomadService "aido" }}
{"url": "http://{{ .Address }}:{{ .Port }}", "token_file": "token"}
{{- end }}
EOT
        destination = "/var/lib/aido-fleet/peers.jsonl"
        change_mode = "noop"
      }

      template {
        data        = "{{ with nomadVar \"nomad/jobs/aido-fleet\" }}{{ .token }}{{ end }}\n"
        destination = "/var/lib/aido-fleet/token"
        perms       = "0600"
        change_mode = "noop"
      }
    }
  }
}
