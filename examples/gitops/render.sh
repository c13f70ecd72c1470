#!/bin/sh
# Regenerate everything kuberay writes in this repository; run it from the repository root
# after changing anything under apps/ (CI runs it and fails when git shows a difference).
# Needs kuberay-gitops installed (pip install kuberay-gitops) and sed.
set -eu
REPO_URL=${REPO_URL:-https://git.example.com/platform/ray-gitops.git}
TEAMS="team-a team-b"

watch=""
for ns in $TEAMS; do
  # The objects KubeRay would create, one file each, with a kustomization.yaml.
  kuberay render "apps/$ns" --output-dir "rendered/$ns"
  # Argo CD: an Application for the rendered directory (ignoreDifferences for the routes
  # the syncer steps), listed by the app of apps in argocd/apps/.
  kuberay render "apps/$ns" --gitops-config argocd-application | sed \
    -e "s|replace-me-app|$ns|" \
    -e "s|https://git.example.com/REPLACE-ME.git|$REPO_URL|" \
    -e "s|path: REPLACE-ME|path: rendered/$ns|" >"argocd/apps/$ns.yaml"
  # Flux: a Kustomization with the drift ignore rules and the health checks.
  kuberay render "apps/$ns" --gitops-config flux | sed \
    -e "s|replace-me-app|$ns|" \
    -e "s|replace-me-repo|flux-system|" \
    -e "s|REPLACE-ME|rendered/$ns|" >"flux/$ns.yaml"
  watch="$watch --watch-namespace $ns"
done
# The syncer, installed by the same GitOps flow, watching every team's namespace; the
# admission policy reserves kuberay's labels to the two appliers below and the syncer.
# shellcheck disable=SC2086 # one --watch-namespace option per team
kuberay syncer-manifests --namespace kuberay-system $watch --output-dir syncer \
  --network-policy --admission-policy \
  --gitops-identity system:serviceaccount:argocd:argocd-application-controller \
  --gitops-identity system:serviceaccount:flux-system:kustomize-controller
# Argo CD's side: the health scripts for argocd-cm and the config-management plugin.
kuberay render apps --gitops-config argocd-cm >argocd/install/argocd-cm-kuberay.yaml
kuberay-argocd-cmp plugin-configmap >argocd/install/kuberay-cmp-plugin.yaml
kuberay-argocd-cmp repo-server-patch >argocd/install/argocd-repo-server-kuberay.yaml
