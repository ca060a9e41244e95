{{/*
One Tidemark process as a Deployment (or, with "kind" "StatefulSet", a StatefulSet of
values.replicaCount pods whose headless Service is its own), its Service and its PodDisruptionBudget.
Call with (dict "root" $ "component" "coordinator" "values" .Values.coordinator
  "args" (list "run" "coordinator") "strategy" "Recreate" "env" <yaml list string> "apiToken" true
  "checkpoints" true), optionally "extraPorts" (list of dict "name" "port"): more metrics ports, on
the container and the Service (the worker's stages), and "initContainers" (yaml list string): the
chart's own init containers, run after values.initContainers. "checkpoints" mounts filesystem
checkpoint storage; on a claim that is not ReadWriteMany the pod gets the label
tidemark.io/checkpoint-claim and a required affinity to the pods carrying it, so every pod of the
claim runs on one node. With image.perComponent the container runs the component's own image and
leaves out args equal to that image's CMD (`run <component>`). The PodDisruptionBudget is rendered
only for more than one pod.
*/}}

{{/* Environment shared by every process: Kafka, topics, storage, logging, HTTP port. */}}
{{- define "tidemark.commonEnv" -}}
{{- $root := .root -}}
{{- $kafka := $root.Values.kafka -}}
- name: TIDEMARK_HTTP_HOST
  value: "0.0.0.0"
- name: TIDEMARK_HTTP_PORT
  value: {{ .values.httpPort | quote }}
- name: TIDEMARK_HOME
  value: /var/lib/tidemark/state
- name: TIDEMARK_STATE_DIR
  value: /var/lib/tidemark/state
- name: TIDEMARK_LOG_LEVEL
  value: {{ $root.Values.logLevel | quote }}
- name: TIDEMARK_TOPIC_PREFIX
  value: {{ $root.Values.topicPrefix | quote }}
- name: KAFKA_BOOTSTRAP_SERVERS
  value: {{ $kafka.bootstrapServers | quote }}
- name: TIDEMARK_KAFKA__SECURITY_PROTOCOL
  value: {{ $kafka.securityProtocol | quote }}
- name: TIDEMARK_KAFKA__REPLICATION_FACTOR
  value: {{ int64 $kafka.replicationFactor | toString | quote }}
{{- if hasPrefix "SASL" $kafka.securityProtocol }}
- name: TIDEMARK_KAFKA__SASL_MECHANISM
  value: {{ $kafka.sasl.mechanism | quote }}
- name: TIDEMARK_KAFKA__SASL_USERNAME
  value: {{ $kafka.sasl.username | quote }}
- name: TIDEMARK_KAFKA__SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "tidemark.kafkaSaslSecretName" $root }}
      key: {{ $kafka.sasl.existingSecretPasswordKey }}
{{- end }}
{{- if $kafka.tls.caSecret }}
- name: TIDEMARK_KAFKA__SSL_CA_LOCATION
  value: /etc/tidemark/kafka-ca/{{ $kafka.tls.caKey }}
{{- end }}
{{- if $root.Values.schemaRegistryUrl }}
- name: TIDEMARK_SCHEMA_REGISTRY_URL
  value: {{ $root.Values.schemaRegistryUrl | quote }}
{{- end }}
- name: TIDEMARK_CHECKPOINT_STORAGE_URL
  value: {{ include "tidemark.checkpointStorageUrl" $root | quote }}
{{- if eq $root.Values.checkpointStorage.type "s3" }}
{{- $s3 := $root.Values.checkpointStorage.s3 }}
{{- if $s3.endpointUrl }}
- name: TIDEMARK_S3__ENDPOINT_URL
  value: {{ $s3.endpointUrl | quote }}
{{- end }}
- name: AWS_REGION
  value: {{ $s3.region | quote }}
{{- if $s3.existingSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ $s3.existingSecret }}
      key: {{ $s3.accessKeyIdKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $s3.existingSecret }}
      key: {{ $s3.secretAccessKeyKey }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "tidemark.workload" -}}
{{- $root := .root -}}
{{- $v := .values -}}
{{- $name := include "tidemark.componentName" . -}}
{{- $fs := and .checkpoints (eq $root.Values.checkpointStorage.type "filesystem") -}}
{{- $colocated := and $fs (include "tidemark.checkpointColocated" $root) -}}
{{- $claim := include "tidemark.checkpointClaimName" $root -}}
{{- $statefulSet := eq (.kind | default "Deployment") "StatefulSet" -}}
{{- $affinity := deepCopy ($v.affinity | default dict) -}}
{{- if $colocated }}
{{- $podAffinity := $affinity.podAffinity | default dict }}
{{- $terms := $podAffinity.requiredDuringSchedulingIgnoredDuringExecution | default list }}
{{- $term := dict "labelSelector" (dict "matchLabels" (dict "tidemark.io/checkpoint-claim" $claim)) "topologyKey" "kubernetes.io/hostname" }}
{{- $_ := set $podAffinity "requiredDuringSchedulingIgnoredDuringExecution" (append $terms $term) }}
{{- $_ := set $affinity "podAffinity" $podAffinity }}
{{- end }}
apiVersion: apps/v1
kind: {{ .kind | default "Deployment" }}
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "tidemark.componentLabels" . | nindent 4 }}
  {{- with (include "tidemark.annotations" $root) }}
  {{- . | trim | nindent 2 }}
  {{- end }}
spec:
  replicas: {{ $v.replicaCount }}
  revisionHistoryLimit: 5
  {{- if $statefulSet }}
  serviceName: {{ $name }}
  podManagementPolicy: Parallel
  updateStrategy:
    type: RollingUpdate
  {{- else }}
  strategy:
    type: {{ .strategy }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "tidemark.componentSelectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "tidemark.componentLabels" . | nindent 8 }}
        {{- if $colocated }}
        tidemark.io/checkpoint-claim: {{ $claim }}
        {{- end }}
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $v.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "tidemark.serviceAccountName" $root }}
      automountServiceAccountToken: {{ $root.Values.serviceAccount.automountToken }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- range . }}
        - name: {{ . }}
        {{- end }}
      {{- end }}
      {{- with $v.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
      {{- if or $v.initContainers .initContainers }}
      initContainers:
        {{- with $v.initContainers }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        {{- with .initContainers }}
        {{- . | nindent 8 }}
        {{- end }}
      {{- end }}
      containers:
        - name: {{ .component }}
          image: {{ include "tidemark.image" (dict "root" $root "component" .component) }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          {{- /* the component's own image says `run <component>` in its CMD */}}
          {{- if not (and $root.Values.image.perComponent (eq (toJson .args) (toJson (list "run" .component)))) }}
          args:
            {{- toYaml .args | nindent 12 }}
          {{- end }}
          ports:
            - name: http
              containerPort: {{ $v.httpPort }}
              protocol: TCP
            {{- range .extraPorts }}
            - name: {{ .name }}
              containerPort: {{ .port }}
              protocol: TCP
            {{- end }}
          env:
            {{- include "tidemark.commonEnv" . | nindent 12 }}
            {{- if .apiToken }}
            - name: TIDEMARK_API_TOKEN
              valueFrom:
                secretKeyRef:
                  name: {{ include "tidemark.apiTokenSecretName" $root }}
                  key: {{ $root.Values.auth.existingSecretKey }}
            {{- end }}
            {{- with .env }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- with $v.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- with $v.extraEnvFrom }}
          envFrom:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          startupProbe:
            httpGet: {path: /livez, port: http}
            {{- toYaml $v.startupProbe | nindent 12 }}
          livenessProbe:
            httpGet: {path: /livez, port: http}
            {{- toYaml $v.livenessProbe | nindent 12 }}
          readinessProbe:
            httpGet: {path: /readyz, port: http}
            {{- toYaml $v.readinessProbe | nindent 12 }}
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.containerSecurityContext | nindent 12 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            - name: state
              mountPath: /var/lib/tidemark/state
            {{- if $fs }}
            - name: checkpoints
              mountPath: {{ $root.Values.checkpointStorage.filesystem.mountPath }}
            {{- end }}
            {{- if $root.Values.kafka.tls.caSecret }}
            - name: kafka-ca
              mountPath: /etc/tidemark/kafka-ca
              readOnly: true
            {{- end }}
            {{- with $v.extraVolumeMounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
      volumes:
        - name: tmp
          emptyDir: {sizeLimit: 1Gi}
        - name: state
          emptyDir: {sizeLimit: {{ $v.stateVolume.sizeLimit }}}
        {{- if $fs }}
        - name: checkpoints
          persistentVolumeClaim:
            claimName: {{ $claim }}
        {{- end }}
        {{- if $root.Values.kafka.tls.caSecret }}
        - name: kafka-ca
          secret:
            secretName: {{ $root.Values.kafka.tls.caSecret }}
        {{- end }}
        {{- with $v.extraVolumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- toYaml . | nindent 8 }}
      {{- end }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "tidemark.componentLabels" . | nindent 4 }}
  {{- with (include "tidemark.annotations" $root) }}
  {{- . | trim | nindent 2 }}
  {{- end }}
spec:
  type: ClusterIP
  {{- if $statefulSet }}
  clusterIP: None
  {{- end }}
  selector:
    {{- include "tidemark.componentSelectorLabels" . | nindent 4 }}
  ports:
    - name: http
      port: {{ $v.httpPort }}
      targetPort: http
      protocol: TCP
    {{- range .extraPorts }}
    - name: {{ .name }}
      port: {{ .port }}
      targetPort: {{ .name }}
      protocol: TCP
    {{- end }}
{{- if and $v.pdb.enabled (gt (int $v.replicaCount) 1) }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "tidemark.componentLabels" . | nindent 4 }}
  {{- with (include "tidemark.annotations" $root) }}
  {{- . | trim | nindent 2 }}
  {{- end }}
spec:
  maxUnavailable: {{ $v.pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "tidemark.componentSelectorLabels" . | nindent 6 }}
{{- end }}
{{- end -}}

{{/*
The worker pod's init containers that create the job's input topics (worker.inputTopics), one per
topic: `tidemark topics create <name> --partitions <n> --if-not-exists [--config k=v]` in the
worker's image, with the environment through which the worker reaches Kafka (replication factor
kafka.replicationFactor). A topic that exists is left as it is, whatever its partitions, so a pod
restarted after the topic grew still starts.
Call with (dict "root" $ "values" .Values.worker); empty when there is nothing to create.
*/}}
{{- define "tidemark.inputTopicContainers" -}}
{{- $root := .root -}}
{{- $w := .values -}}
{{- if $w.inputTopics.create }}
{{- range $i, $topic := $w.inputTopics.topics }}
{{- $args := list "topics" "create" $topic.name "--partitions" (int ($topic.partitions | default 1) | toString) "--if-not-exists" }}
{{- range $key, $value := ($topic.config | default dict) }}
{{- $args = concat $args (list "--config" (printf "%s=%s" $key $value)) }}
{{- end }}
- name: create-topic-{{ $i }}
  image: {{ include "tidemark.image" (dict "root" $root "component" "worker") }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  args:
    {{- toYaml $args | nindent 4 }}
  env:
    {{- include "tidemark.commonEnv" (dict "root" $root "values" $w) | nindent 4 }}
    {{- with $w.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $w.extraEnvFrom }}
  envFrom:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  resources:
    {{- toYaml $w.inputTopics.resources | nindent 4 }}
  securityContext:
    {{- toYaml $root.Values.containerSecurityContext | nindent 4 }}
  volumeMounts:
    - name: tmp
      mountPath: /tmp
    - name: state
      mountPath: /var/lib/tidemark/state
    {{- if $root.Values.kafka.tls.caSecret }}
    - name: kafka-ca
      mountPath: /etc/tidemark/kafka-ca
      readOnly: true
    {{- end }}
    {{- with $w.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}
{{- end }}
{{- end -}}
