{{/*
Labels Helm adds to every object, beside the ones deploy/ has (the check
ignores exactly these four when it compares the two).
*/}}
{{- define "kubeplug.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The objects deploy/ labels `app.kubernetes.io/name: kubeplug`. */}}
{{- define "kubeplug.labels" -}}
app.kubernetes.io/name: kubeplug
{{ include "kubeplug.helmLabels" . }}
{{- end }}

{{/* What the kustomization's ConfigMap generators label. */}}
{{- define "kubeplug.configMapLabels" -}}
app.kubernetes.io/part-of: kubeplug
{{ include "kubeplug.helmLabels" . }}
{{- end }}

{{/*
Where the serving certificates come from (certificates.source): self,
certManager or secret; `certManager.enabled: true` (earlier values files)
means certManager.
*/}}
{{- define "kubeplug.certSource" -}}
{{- $source := ternary "certManager" .Values.certificates.source .Values.certManager.enabled -}}
{{- if not (has $source (list "self" "certManager" "secret")) -}}
{{- fail (printf "certificates.source: %q is none of self, certManager, secret" $source) -}}
{{- end -}}
{{- $source -}}
{{- end }}

{{/* The Secret the host keeps its own certificate in (certificates.source=self). */}}
{{- define "kubeplug.servingCertsSecret" -}}
kubeplug-serving-certs
{{- end }}

{{/* The pods, and what selects them. */}}
{{- define "kubeplug.selectorLabels" -}}
app.kubernetes.io/name: kubeplug
{{- end }}

{{/* A CRD from files/, with Helm's keep policy when crds.keep. */}}
{{- define "kubeplug.crd" -}}
{{- $crd := .crd -}}
{{- if .root.Values.crds.keep -}}
{{- $meta := $crd.metadata -}}
{{- $_ := set $meta "annotations" (merge (dict "helm.sh/resource-policy" "keep") ($meta.annotations | default dict)) -}}
{{- end -}}
{{- $_ := set $crd.metadata "labels" (merge ($crd.metadata.labels | default dict) (include "kubeplug.helmLabels" .root | fromYaml)) -}}
{{ toYaml $crd }}
{{- end }}
