{{/*
The pod template Spark merges into every executor pod (spark.mode=kubernetes).
Spark appends the argument "executor" to the command, which the script ignores.
*/}}
{{- define "sana.executorPodTemplate" -}}
apiVersion: v1
kind: Pod
metadata:
  labels:
    {{- include "sana.labels" . | nindent 4 }}
    app.kubernetes.io/component: spark-executor
spec:
  automountServiceAccountToken: false
  enableServiceLinks: false
  securityContext:
    {{- toYaml .Values.manager.podSecurityContext | nindent 4 }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: executor
      command: ["/bin/bash", "/opt/sana/spark-conf/executor.sh"]
      env:
        - name: HOME
          value: /tmp
        - name: SANA_CHECKPOINT_DIR
          value: {{ .Values.checkpoints.dir | quote }}
      securityContext:
        {{- toYaml .Values.manager.securityContext | nindent 8 }}
      volumeMounts:
        - name: sana-spark-conf
          mountPath: /opt/sana/spark-conf
          readOnly: true
        # Spark uses a mount named spark-local-dir-* as the executor's local dir.
        - name: spark-local-dir-1
          mountPath: /tmp
        - name: checkpoints
          mountPath: {{ .Values.checkpoints.dir }}
  volumes:
    - name: sana-spark-conf
      configMap:
        name: {{ include "sana.fullname" . }}-spark
    - name: spark-local-dir-1
      emptyDir: {}
    - name: checkpoints
      {{- if .Values.checkpoints.persistence.enabled }}
      persistentVolumeClaim:
        claimName: {{ include "sana.checkpointClaim" . }}
      {{- else }}
      emptyDir: {}
      {{- end }}
{{- end }}
