{{/*
Naming and label helpers. Names are truncated to 63 characters (DNS label limit).
*/}}

{{/* Chart name, overridable with nameOverride. */}}
{{- define "tidemark.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name "<release>-<chart>", or the release name when it already contains the chart name. */}}
{{- define "tidemark.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "name-version" for the helm.sh/chart label. */}}
{{- define "tidemark.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels shared by every resource of the release. */}}
{{- define "tidemark.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tidemark.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Standard labels of every resource. */}}
{{- define "tidemark.labels" -}}
helm.sh/chart: {{ include "tidemark.chart" . }}
{{ include "tidemark.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tidemark
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Metadata annotations of every resource (commonAnnotations), as a block or nothing. */}}
{{- define "tidemark.annotations" -}}
{{- with .Values.commonAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Name of one component's resources: "<fullname>-<component>". Call with (dict "root" $ "component" "coordinator"). */}}
{{- define "tidemark.componentName" -}}
{{- printf "%s-%s" (include "tidemark.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of one component's resources. */}}
{{- define "tidemark.componentLabels" -}}
{{ include "tidemark.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Selector labels of one component's pods. */}}
{{- define "tidemark.componentSelectorLabels" -}}
{{ include "tidemark.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/*
The image of one component (dict "root" $ "component" "coordinator"); a digest wins over the tag,
the tag defaults to appVersion. With image.perComponent (the default) it is the component's own
image, <image.repository>-<component>, built from services/<component>/Dockerfile; otherwise the
one base image (the top-level Dockerfile), pinned by image.digest. image.components.<component>
overrides the registry, repository, tag or digest of one component (a job's own worker image).
*/}}
{{- define "tidemark.image" -}}
{{- $image := .root.Values.image -}}
{{- $own := get ($image.components | default dict) .component | default dict -}}
{{- $repo := $image.repository -}}
{{- $digest := $image.digest -}}
{{- if $image.perComponent -}}
{{- if $image.digest -}}
{{- fail "image.digest pins the one base image: set image.perComponent=false to run it, or pin each component's image with image.components.<component>.digest" -}}
{{- end -}}
{{- $repo = printf "%s-%s" $repo .component -}}
{{- end -}}
{{- $repo = $own.repository | default $repo -}}
{{- $digest = $own.digest | default $digest -}}
{{- $registry := $own.registry | default $image.registry -}}
{{- if $registry -}}{{- $repo = printf "%s/%s" $registry $repo -}}{{- end -}}
{{- if $digest -}}
{{- printf "%s@%s" $repo $digest -}}
{{- else -}}
{{- printf "%s:%s" $repo ($own.tag | default $image.tag | default .root.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{- define "tidemark.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tidemark.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Secret holding the coordinator API token: auth.existingSecret, else "<fullname>-api-token". */}}
{{- define "tidemark.apiTokenSecretName" -}}
{{- default (printf "%s-api-token" (include "tidemark.fullname" .)) .Values.auth.existingSecret -}}
{{- end -}}

{{/* "true" when the chart renders the API-token Secret (auth.apiToken or auth.generate), else "". */}}
{{- define "tidemark.createsApiTokenSecret" -}}
{{- if and (not .Values.auth.existingSecret) (or .Values.auth.apiToken .Values.auth.generate) -}}true{{- end -}}
{{- end -}}

{{/* Secret holding the Kafka SASL password. */}}
{{- define "tidemark.kafkaSaslSecretName" -}}
{{- default (printf "%s-kafka-sasl" (include "tidemark.fullname" .)) .Values.kafka.sasl.existingSecret -}}
{{- end -}}

{{/* PVC of filesystem checkpoint storage. */}}
{{- define "tidemark.checkpointClaimName" -}}
{{- default (printf "%s-checkpoints" (include "tidemark.fullname" .)) .Values.checkpointStorage.filesystem.existingClaim -}}
{{- end -}}

{{/*
"true" when the pods that mount the checkpoint claim must share one node: filesystem storage on a
claim that is not ReadWriteMany. A ReadWriteOnce volume is attached to one node at a time, and
the coordinator, checkpoint-store, materializer and worker all read and write the same files.
*/}}
{{- define "tidemark.checkpointColocated" -}}
{{- $s := .Values.checkpointStorage -}}
{{- if and (eq $s.type "filesystem") (not (has "ReadWriteMany" $s.filesystem.accessModes)) -}}true{{- end -}}
{{- end -}}

{{/* TIDEMARK_CHECKPOINT_STORAGE_URL from checkpointStorage. */}}
{{- define "tidemark.checkpointStorageUrl" -}}
{{- $s := .Values.checkpointStorage -}}
{{- if eq $s.type "s3" -}}
{{- printf "s3://%s/%s" (required "checkpointStorage.s3.bucket is required when checkpointStorage.type is s3" $s.s3.bucket) $s.s3.prefix | trimSuffix "/" -}}
{{- else -}}
{{- printf "file://%s" $s.filesystem.mountPath -}}
{{- end -}}
{{- end -}}

{{/* Fails rendering on inconsistent values the schema cannot express. */}}
{{- define "tidemark.validate" -}}
{{- if and (hasPrefix "SASL" .Values.kafka.securityProtocol) (not .Values.kafka.sasl.username) -}}
{{- fail "kafka.sasl.username is required when kafka.securityProtocol is SASL_PLAINTEXT or SASL_SSL" -}}
{{- end -}}
{{- if and (hasPrefix "SASL" .Values.kafka.securityProtocol) (not .Values.kafka.sasl.existingSecret) (not .Values.kafka.sasl.password) -}}
{{- fail "kafka.sasl.password or kafka.sasl.existingSecret is required with SASL" -}}
{{- end -}}
{{- if gt (int .Values.coordinator.replicaCount) 1 -}}
{{- fail "coordinator.replicaCount must be 1: the coordinator is a singleton" -}}
{{- end -}}
{{- $auth := .Values.auth -}}
{{- if and $auth.existingSecret (or $auth.apiToken $auth.generate) -}}
{{- fail "auth.existingSecret names a Secret you created: leave auth.apiToken and auth.generate unset with it" -}}
{{- end -}}
{{- if and $auth.apiToken $auth.generate -}}
{{- fail "auth.apiToken and auth.generate exclude each other: give a token, or let the chart generate one" -}}
{{- end -}}
{{- $fs := .Values.checkpointStorage.filesystem -}}
{{- if and (eq .Values.checkpointStorage.type "filesystem") (has "ReadWriteOncePod" $fs.accessModes) -}}
{{- fail "checkpointStorage.filesystem.accessModes: ReadWriteOncePod lets one pod mount the claim, but the coordinator, checkpoint-store, materializer and worker all use it: use ReadWriteOnce (one node) or ReadWriteMany, or checkpointStorage.type=s3" -}}
{{- end -}}
{{- if and .Values.worker.enabled .Values.worker.hosts.enabled (include "tidemark.checkpointColocated" .) -}}
{{- fail "worker.hosts.enabled spreads the worker processes over several nodes, so checkpoint storage must be reachable from all of them: set checkpointStorage.type=s3, or a ReadWriteMany claim in checkpointStorage.filesystem.accessModes" -}}
{{- end -}}
{{- end -}}

{{/*
The named metrics ports the monitors scrape, as a JSON list: "http" on every process; "stage-<i>" on
the worker pod (stage i of the job), or "process-<i>" on the worker-host pods (worker.hosts).
*/}}
{{- define "tidemark.metricsPorts" -}}
{{- $ports := list "http" }}
{{- $w := .Values.worker }}
{{- if $w.enabled }}
{{- if $w.hosts.enabled }}
{{- $ports = append $ports "process-0" }}
{{- else }}
{{- range $i := until (int $w.stages) }}
{{- $ports = append $ports (printf "stage-%d" $i) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $ports }}
{{- end -}}
