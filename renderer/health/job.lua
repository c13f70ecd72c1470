-- kuberay-gitops: Argo CD health of Jobs (key resource.customizations.health.batch_Job).
-- A custom script replaces Argo CD's built-in Job check for every Job, so a Job that kuberay
-- did not render gets the built-in verdict: Failed condition Degraded, Complete Healthy,
-- Suspended condition Suspended, anything else Progressing.
-- A RayJob's submitter Job (labels app.kubernetes.io/managed-by=kuberay-render and
-- kuberay.io/origin-kind=RayJob) follows the RayJob as kuberay-syncer reports it in the
-- annotation status.kuberay.io/job-deployment-status: a retried or still-gated submission is
-- Progressing, not Degraded. Only Argo CD's default libraries are used (no string library).
local hs = {}
local meta = obj.metadata or {}
local labels = meta.labels or {}
local annotations = meta.annotations or {}
local status = obj.status or {}
local spec = obj.spec or {}

local function condition(kind)
  for _, c in ipairs(status.conditions or {}) do
    if c.type == kind and c.status == "True" then
      return c
    end
  end
  return nil
end

local function builtin()
  local failed = condition("Failed")
  if failed ~= nil then
    return "Degraded", failed.message or "Job failed"
  end
  local complete = condition("Complete")
  if complete ~= nil then
    return "Healthy", complete.message or "Job completed"
  end
  if condition("Suspended") ~= nil or spec.suspend == true then
    return "Suspended", "Job is suspended"
  end
  return "Progressing", "Job is running"
end

local function gated()
  local template = (spec.template or {}).spec or {}
  for _, gate in ipairs(template.schedulingGates or {}) do
    if gate.name == "kuberay.io/cluster-ready" then
      return true
    end
  end
  return false
end

if labels["app.kubernetes.io/managed-by"] == "kuberay-render" and labels["kuberay.io/origin-kind"] == "RayJob" then
  local origin = labels["kuberay.io/origin-name"] or meta.name or ""
  local what = "RayJob " .. origin .. ": "
  local deployment = annotations["status.kuberay.io/job-deployment-status"]
  local job = annotations["status.kuberay.io/job-status"]
  local ray = ""
  if job ~= nil and job ~= "" then
    ray = " (Ray job " .. job .. ")"
  end
  if deployment == "Complete" then
    hs.status, hs.message = "Healthy", what .. "Complete" .. ray
  elseif deployment == "Failed" then
    hs.status, hs.message = "Degraded", what .. "Failed" .. ray
  elseif deployment == "Suspended" then
    hs.status, hs.message = "Suspended", what .. "Suspended"
  elseif deployment == "Running" or deployment == "Retrying" or deployment == "Waiting" then
    hs.status, hs.message = "Progressing", what .. deployment .. ray
  elseif deployment == nil or deployment == "" or deployment == "Initializing" then
    local verdict, message = builtin()
    if verdict == "Progressing" and gated() then
      message = "submission gated until the Ray cluster is ready (kuberay.io/cluster-ready)"
    end
    hs.status, hs.message = verdict, what .. message
  else
    hs.status, hs.message = "Unknown", what .. "unknown jobDeploymentStatus " .. tostring(deployment)
  end
  return hs
end

hs.status, hs.message = builtin()
return hs
