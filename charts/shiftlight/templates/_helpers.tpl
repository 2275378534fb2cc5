{{/* Chart name, truncated to the 63 characters Kubernetes allows in a label value. */}}
{{- define "shiftlight.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects. */}}
{{- define "shiftlight.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "shiftlight.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "shiftlight.selectorLabels" -}}
app.kubernetes.io/name: {{ include "shiftlight.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "shiftlight.labels" -}}
helm.sh/chart: {{ include "shiftlight.chart" . }}
{{ include "shiftlight.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: shiftlight
{{- end }}

{{- define "shiftlight.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "shiftlight.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "shiftlight.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* ConfigMap key of a policy file: its path under policies/ with "/" replaced by "." (keys allow no "/"). */}}
{{- define "shiftlight.policyKey" -}}
{{- trimPrefix "policies/" . | replace "/" "." }}
{{- end }}

{{/*
"true" where the cluster serves admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy (GA in Kubernetes 1.30):
its discovery lists the kind (helm install/upgrade, or `helm template --api-versions
admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy`), or the cluster's version is 1.30 or later. Empty
otherwise: the approval policy is then left out and the operator's SubjectAccessReview checks approvals alone.
*/}}
{{- define "shiftlight.admissionPolicyServed" -}}
{{- if or (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy") (semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version) -}}
true
{{- end -}}
{{- end }}
