{{/*
Names, labels and the pieces every Sluice pod shares. The image runs as 65532
(Dockerfile: USER 65532:65532); the official Postgres image's user is 999.
*/}}

{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.fullname" -}}
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

{{/* A component's name: "<fullname>-<component>", cut to 63 characters. */}}
{{- define "sluice.componentName" -}}
{{- printf "%s-%s" (include "sluice.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object: call with (dict "root" $ "component" "scheduler"). */}}
{{- define "sluice.labels" -}}
helm.sh/chart: {{ include "sluice.chart" .root }}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: sluice
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The labels a component's selectors match (never change them on upgrade). */}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "sluice.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
Where task Jobs run, one namespace per line (ADR 0032): tasks.namespace when it pins
every Job there; else each DAG's own, so every served namespace. With
watch.allNamespaces (and no tasks.namespace) Jobs may run anywhere: these are then
the namespaces the task ServiceAccount is made in, the release's and
tasks.serviceAccount.namespaces.
*/}}
{{- define "sluice.taskNamespaces" -}}
{{- if .Values.tasks.namespace }}
{{ .Values.tasks.namespace }}
{{- else if .Values.watch.allNamespaces }}
{{- range (prepend .Values.tasks.serviceAccount.namespaces .Release.Namespace) | uniq }}
{{ . }}
{{- end }}
{{- else }}
{{- include "sluice.watchNamespaces" . }}
{{- end -}}
{{- end -}}

{{/* "true" when Jobs may run in any namespace: the schedulers' Job rights are a ClusterRole. */}}
{{- define "sluice.jobsAnywhere" -}}
{{- if and .Values.watch.allNamespaces (not .Values.tasks.namespace) -}}true{{- end -}}
{{- end -}}

{{/* The namespaces whose DAG, DagRun and Backfill objects Sluice serves (one per
line; none with watch.allNamespaces). */}}
{{- define "sluice.watchNamespaces" -}}
{{- if not .Values.watch.allNamespaces -}}
{{- range (.Values.watch.namespaces | default (list .Release.Namespace)) | uniq }}
{{ . }}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sluice.schedulerServiceAccount" -}}
{{- if .Values.scheduler.serviceAccount.create -}}
{{- default (include "sluice.componentName" (dict "root" . "component" "scheduler")) .Values.scheduler.serviceAccount.name -}}
{{- else -}}
{{- required "scheduler.serviceAccount.name is required when scheduler.serviceAccount.create is false" .Values.scheduler.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "sluice.operatorServiceAccount" -}}
{{- if .Values.operator.serviceAccount.create -}}
{{- default (include "sluice.componentName" (dict "root" . "component" "operator")) .Values.operator.serviceAccount.name -}}
{{- else -}}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "sluice.uiServiceAccount" -}}
{{- if .Values.ui.serviceAccount.create -}}
{{- default (include "sluice.componentName" (dict "root" . "component" "ui")) .Values.ui.serviceAccount.name -}}
{{- else -}}
{{- required "ui.serviceAccount.name is required when ui.serviceAccount.create is false" .Values.ui.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "sluice.taskServiceAccount" -}}
{{- if .Values.tasks.serviceAccount.create -}}
{{- default (include "sluice.componentName" (dict "root" . "component" "task")) .Values.tasks.serviceAccount.name -}}
{{- else -}}
{{- required "tasks.serviceAccount.name is required when tasks.serviceAccount.create is false" .Values.tasks.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The bundled Postgres runs unless database.existingSecret names an external one. */}}
{{- define "sluice.bundledPostgres" -}}
{{- if not .Values.database.existingSecret -}}true{{- end -}}
{{- end -}}

{{- define "sluice.postgresName" -}}
{{- include "sluice.componentName" (dict "root" . "component" "postgres") -}}
{{- end -}}

{{/* The Secret and key holding the bundled Postgres's password: postgres.existingSecret, else the generated one. */}}
{{- define "sluice.postgresSecretName" -}}
{{- default (include "sluice.postgresName" .) .Values.postgres.existingSecret -}}
{{- end -}}

{{- define "sluice.postgresSecretKey" -}}
{{- if .Values.postgres.existingSecret -}}{{ .Values.postgres.existingSecretKey }}{{- else -}}password{{- end -}}
{{- end -}}

{{- define "sluice.taskApiSecretName" -}}
{{- default (include "sluice.componentName" (dict "root" . "component" "task-api")) .Values.taskApi.existingSecret -}}
{{- end -}}

{{/*
The generated Secret's keys file, base64: the live Secret's (`lookup`, during
`helm install/upgrade`), else one new random key. Drawn once per rendering and
kept in .Values (one map for every template of the chart), so the Secret and the
schedulers' checksum annotation see the same key.
*/}}
{{- define "sluice.generatedTaskApiKeys" -}}
{{- if not (hasKey .Values "_sluiceGeneratedTaskApiKeys") -}}
{{- $live := lookup "v1" "Secret" .Release.Namespace (include "sluice.taskApiSecretName" .) -}}
{{- $keys := printf "%s\n" (randAlphaNum 64) | b64enc -}}
{{- if and $live $live.data (index $live.data "keys") -}}
{{- $keys = index $live.data "keys" -}}
{{- end -}}
{{- $_ := set .Values "_sluiceGeneratedTaskApiKeys" $keys -}}
{{- end -}}
{{- index .Values "_sluiceGeneratedTaskApiKeys" -}}
{{- end -}}

{{/*
The schedulers' `checksum/task-api-keys` annotation: a change rolls them out,
since a replica reads its keys at start. Of the keys themselves when the chart
makes the Secret; of the Secret's name and key when it is taskApi.existingSecret,
which the chart does not read (it cannot under Argo CD or `helm template`):
there taskApi.keysRevision is what changes it.
*/}}
{{- define "sluice.taskApiKeysChecksum" -}}
{{- $revision := toString .Values.taskApi.keysRevision -}}
{{- if .Values.taskApi.existingSecret -}}
{{- printf "secret:%s/%s\nrevision:%s" .Values.taskApi.existingSecret .Values.taskApi.existingSecretKey $revision | sha256sum -}}
{{- else -}}
{{- printf "keys:%s\nrevision:%s" (include "sluice.generatedTaskApiKeys" .) $revision | sha256sum -}}
{{- end -}}
{{- end -}}

{{- define "sluice.taskApiUrl" -}}
{{- printf "http://%s.%s.svc:%d" (include "sluice.componentName" (dict "root" . "component" "task-api")) .Release.Namespace (int .Values.taskApi.port) -}}
{{- end -}}

{{/* The restricted Pod Security Standard, pod level (uid: the image's user). */}}
{{- define "sluice.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .uid }}
runAsGroup: {{ .uid }}
fsGroup: {{ .uid }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The restricted Pod Security Standard, container level. */}}
{{- define "sluice.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/*
How Sluice's pods reach the database. An external one: SLUICE_DATABASE_URL from
database.existingSecret. The bundled one: a URL without a password, and the
password in PGPASSWORD, which libpq (psycopg2) reads when the URL has none; so
the password can come from any Secret, as it is, with no URL to build or escape.
*/}}
{{- define "sluice.databaseEnv" -}}
{{- if include "sluice.bundledPostgres" . -}}
- name: SLUICE_DATABASE_URL
  value: {{ printf "postgresql://%s@%s.%s.svc:5432/%s" .Values.postgres.user (include "sluice.postgresName" .) .Release.Namespace .Values.postgres.database | quote }}
- name: PGPASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "sluice.postgresSecretName" . }}
      key: {{ include "sluice.postgresSecretKey" . }}
{{- else -}}
- name: SLUICE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.existingSecret }}
      key: {{ .Values.database.existingSecretKey }}
{{- end -}}
{{- end -}}

{{/*
`sluice db upgrade`, tried again while it fails (the database may still be
starting: the bundled Postgres initialises on first start, an external one may
be restarting). Safe from several pods at once: the migrations take a Postgres
advisory lock, and an up-to-date schema is a no-op.
*/}}
{{- define "sluice.dbUpgradeScript" -}}
attempt=1
until sluice db upgrade; do
  if [ "$attempt" -ge "$SLUICE_DB_UPGRADE_ATTEMPTS" ]; then
    echo "sluice db upgrade failed $attempt times; giving up (is SLUICE_DATABASE_URL right?)" >&2
    exit 1
  fi
  echo "sluice db upgrade failed (attempt $attempt of $SLUICE_DB_UPGRADE_ATTEMPTS); the database may still be starting; again in ${SLUICE_DB_UPGRADE_DELAY}s" >&2
  attempt=$((attempt + 1))
  sleep "$SLUICE_DB_UPGRADE_DELAY"
done
{{- end -}}

{{/* A container that runs the migrations (an init container, or the hook Job's). */}}
{{- define "sluice.migrationsContainer" -}}
- name: {{ .name }}
  image: {{ include "sluice.image" .root }}
  imagePullPolicy: {{ .root.Values.image.pullPolicy }}
  command: ["/bin/sh", "-c"]
  args:
    - |
      {{- include "sluice.dbUpgradeScript" .root | nindent 6 }}
  env:
    {{- include "sluice.databaseEnv" .root | nindent 4 }}
    - name: SLUICE_DB_UPGRADE_ATTEMPTS
      value: {{ .root.Values.migrations.attempts | quote }}
    - name: SLUICE_DB_UPGRADE_DELAY
      value: {{ .root.Values.migrations.retryDelaySeconds | quote }}
  securityContext:
    {{- include "sluice.containerSecurityContext" .root | nindent 4 }}
  resources:
    {{- toYaml .root.Values.migrations.resources | nindent 4 }}
  volumeMounts:
    - name: tmp
      mountPath: /tmp
{{- end -}}

{{/*
Preferred anti-affinity by host unless the component's `affinity` is set.
Call with (dict "root" $ "component" "scheduler" "affinity" .Values.scheduler.affinity).
*/}}
{{- define "sluice.affinity" -}}
{{- if .affinity -}}
{{ toYaml .affinity }}
{{- else -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "sluice.selectorLabels" . | nindent 12 }}
{{- end -}}
{{- end -}}

{{/* topologySpreadConstraints; an item without a labelSelector selects the component's pods. */}}
{{- define "sluice.topologySpread" -}}
{{- $selector := dict "matchLabels" (include "sluice.selectorLabels" . | fromYaml) -}}
{{- $items := list -}}
{{- range .constraints -}}
{{- if hasKey . "labelSelector" -}}
{{- $items = append $items . -}}
{{- else -}}
{{- $items = append $items (merge (dict "labelSelector" $selector) .) -}}
{{- end -}}
{{- end -}}
{{- toYaml $items -}}
{{- end -}}

{{/* The DAG reference policy of this release (cluster-scoped: its name says whose). */}}
{{- define "sluice.dagReferencePolicyName" -}}
{{- printf "sluice.io-dag-references-%s-%s" .Release.Namespace (include "sluice.fullname" .) | trunc 253 -}}
{{- end -}}

{{/* What no DAG's podTemplate may name, separated by spaces: the Secrets with the
database URL or password and the task API keys, and Sluice's ServiceAccounts. */}}
{{- define "sluice.protectedSecrets" -}}
{{- $secrets := list (include "sluice.taskApiSecretName" .) -}}
{{- if .Values.database.existingSecret -}}
{{- $secrets = append $secrets .Values.database.existingSecret -}}
{{- else -}}
{{- $secrets = concat $secrets (list (include "sluice.postgresSecretName" .) (include "sluice.postgresName" .)) -}}
{{- end -}}
{{- $secrets | uniq | join " " -}}
{{- end -}}

{{- define "sluice.protectedServiceAccounts" -}}
{{- list (include "sluice.schedulerServiceAccount" .) (include "sluice.operatorServiceAccount" .) | uniq | join " " -}}
{{- end -}}

{{/*
Extension points, the same for every Sluice Deployment (scheduler, operator, UI):
call each with the component's values, never copy one into a template by hand
(docs/adr/0043).
*/}}

{{/*
A pod's securityContext: the restricted defaults (sluice.podSecurityContext) with
the component's podSecurityContext merged over them, key by key (a map merges, a
list or a value replaces). Call with (dict "uid" 65532 "override" .Values.scheduler.podSecurityContext).
*/}}
{{- define "sluice.podSecurityContextWith" -}}
{{- $context := include "sluice.podSecurityContext" (dict "uid" .uid) | fromYaml -}}
{{- toYaml (mergeOverwrite $context (deepCopy (.override | default dict))) -}}
{{- end -}}

{{/* The main container's securityContext: the restricted defaults, the component's securityContext merged over. */}}
{{- define "sluice.containerSecurityContextWith" -}}
{{- $context := include "sluice.containerSecurityContext" . | fromYaml -}}
{{- toYaml (mergeOverwrite $context (deepCopy (.override | default dict))) -}}
{{- end -}}

{{/*
List items to append to a list the template already has (containers, init
containers, volumes, volume mounts), rendered through `tpl`; nothing when there
are none. Call with (dict "root" $ "items" .Values.scheduler.extraContainers "indent" 8).
*/}}
{{- define "sluice.extraItems" -}}
{{- if .items -}}
{{- tpl (toYaml .items) .root | nindent (int .indent) -}}
{{- end -}}
{{- end -}}

{{/* `priorityClassName: NAME` when the component's values name one; nothing else.
Call with (dict "values" .Values.scheduler "indent" 6). */}}
{{- define "sluice.priorityClassName" -}}
{{- with .values.priorityClassName -}}
{{- printf "priorityClassName: %s" . | nindent (int $.indent) -}}
{{- end -}}
{{- end -}}

{{/*
The generated Postgres password: the live Secret's (`lookup`, during `helm
install/upgrade`), else a new random one; drawn once per rendering and kept in
.Values, so the Secret and the pods' checksum annotation see the same password.
*/}}
{{- define "sluice.generatedPostgresPassword" -}}
{{- if not (hasKey .Values "_sluiceGeneratedPostgresPassword") -}}
{{- $live := lookup "v1" "Secret" .Release.Namespace (include "sluice.postgresName" .) -}}
{{- $password := randAlphaNum 32 -}}
{{- if and $live $live.data (index $live.data "password") -}}
{{- $password = index $live.data "password" | b64dec -}}
{{- end -}}
{{- $_ := set .Values "_sluiceGeneratedPostgresPassword" $password -}}
{{- end -}}
{{- index .Values "_sluiceGeneratedPostgresPassword" -}}
{{- end -}}

{{/*
Every Sluice pod's `checksum/secrets` annotation: a change rolls it out, since a
process reads its Secrets (as environment variables) at start. Of what the chart
knows: how the database is reached (the URL, or the Secret and key it is in), the
generated Postgres password itself, the log store's credentials Secret's name, and
secretsRevision, the value to change after changing a Secret of your own (which
the chart does not read: it cannot under Argo CD or `helm template`; ADR 0030).
*/}}
{{- define "sluice.secretsChecksum" -}}
{{- $parts := list (include "sluice.databaseEnv" .) -}}
{{- if and (include "sluice.bundledPostgres" .) (not .Values.postgres.existingSecret) -}}
{{- $parts = append $parts (printf "password:%s" (include "sluice.generatedPostgresPassword" .)) -}}
{{- end -}}
{{- $parts = append $parts (printf "logs:%s" .Values.logs.existingSecret) -}}
{{- $parts = append $parts (printf "revision:%s" (toString .Values.secretsRevision)) -}}
{{- join "\n" $parts | sha256sum -}}
{{- end -}}
