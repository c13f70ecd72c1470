-- kuberay-gitops: Argo CD health of kuberay's ConfigMaps (key resource.customizations.health.ConfigMap).
-- Argo CD runs this for every ConfigMap. Only four kinds get a verdict from their content:
--   * the syncer's status ConfigMap of a RayJob (label kuberay.io/role=status): data.jobDeploymentStatus
--   * the syncer's status ConfigMap of a RayService: data.serviceStatus and data.pendingCluster
--   * the syncer's status ConfigMap of a Ray cluster: data.state, the condition flags and the
--     worker counts (KubeRay's state never leaves "ready", so the conditions decide)
--   * the rendered intent ConfigMap of a RayService: the syncer's status.kuberay.io/ annotations
-- Every other ConfigMap is Healthy. Only Argo CD's default libraries are used (no string library).
local hs = {}
local meta = obj.metadata or {}
local labels = meta.labels or {}
local annotations = meta.annotations or {}
local data = obj.data or {}
local role = labels["kuberay.io/role"]
local kind = labels["kuberay.io/origin-kind"]
local origin = labels["kuberay.io/origin-name"] or meta.name or ""

local function rayjob(deployment, job)
  local what = "RayJob " .. origin .. ": "
  local ray = ""
  if job ~= nil and job ~= "" then
    ray = " (Ray job " .. job .. ")"
  end
  if deployment == "Complete" then
    return "Healthy", what .. "Complete" .. ray
  elseif deployment == "Failed" then
    return "Degraded", what .. "Failed" .. ray
  elseif deployment == "Suspended" then
    return "Suspended", what .. "Suspended"
  elseif deployment == "Running" then
    return "Progressing", what .. "Running" .. ray
  elseif deployment == "Retrying" then
    return "Progressing", what .. "Retrying after a failed attempt" .. ray
  elseif deployment == "Waiting" then
    return "Progressing", what .. "Waiting for the job to start" .. ray
  elseif deployment == nil or deployment == "" or deployment == "Initializing" then
    return "Progressing", what .. "Initializing: waiting for the Ray cluster"
  end
  return "Unknown", what .. "unknown jobDeploymentStatus " .. tostring(deployment)
end

local function rayservice(serving, active, pending)
  local what = "RayService " .. origin .. ": "
  if serving == "Running" then
    if pending ~= nil and pending ~= "" then
      return "Progressing", what .. "serving from " .. (active or "") .. ", upgrading to " .. pending
    end
    return "Healthy", what .. "serving from " .. (active or "")
  end
  if pending ~= nil and pending ~= "" then
    return "Progressing", what .. "not serving yet; preparing " .. pending
  end
  return "Progressing", what .. "not serving yet"
end

local function raycluster(d)
  local what = "RayCluster " .. origin .. ": "
  local desired = tonumber(d.desiredWorkers or "0") or 0
  local available = tonumber(d.availableWorkers or "0") or 0
  local workers = tostring(available) .. "/" .. tostring(desired) .. " workers available"
  if d.state == "suspended" or d.suspended == "True" then
    return "Suspended", what .. "suspended"
  end
  if d.replicaFailure == "True" then
    return "Degraded", what .. "replica failure; " .. workers
  end
  if d.provisioned ~= "True" then
    return "Progressing", what .. "provisioning; " .. workers
  end
  if d.headPodReady ~= "True" then
    return "Degraded", what .. "head Pod not ready; " .. workers
  end
  if available < desired then
    return "Progressing", what .. "recovering; " .. workers
  end
  return "Healthy", what .. (d.state or "") .. "; " .. workers
end

if role == "status" and labels["app.kubernetes.io/managed-by"] == "kuberay-syncer" then
  if kind == "RayJob" then
    hs.status, hs.message = rayjob(data.jobDeploymentStatus, data.jobStatus)
    return hs
  elseif kind == "RayService" then
    hs.status, hs.message = rayservice(data.serviceStatus, data.activeCluster, data.pendingCluster)
    return hs
  elseif kind == "RayCluster" then
    hs.status, hs.message = raycluster(data)
    return hs
  end
end

if role == "intent" and kind == "RayService"
    and labels["app.kubernetes.io/managed-by"] == "kuberay-render" then
  local serving = annotations["status.kuberay.io/service-status"]
  if serving == nil then
    hs.status = "Progressing"
    hs.message = "RayService " .. origin .. ": waiting for kuberay-syncer to report"
    return hs
  end
  hs.status, hs.message = rayservice(serving, annotations["status.kuberay.io/active-cluster"],
    annotations["status.kuberay.io/pending-cluster"])
  return hs
end

hs.status = "Healthy"
return hs
