-- kuberay-gitops: Argo CD health of HTTPRoutes
-- (key resource.customizations.health.gateway.networking.k8s.io_HTTPRoute).
-- A custom script replaces Argo CD's built-in HTTPRoute check, so every route first gets the
-- same verdict from its parents' conditions: ResolvedRefs or Accepted False is Degraded,
-- Programmed not True is Progressing, no status from the current generation is Progressing.
-- A RayService's route (labels app.kubernetes.io/managed-by=kuberay-render and
-- kuberay.io/origin-kind=RayService), whose weights kuberay-syncer steps during an incremental
-- upgrade, is then Progressing while it routes to two clusters (the upgrade's steps), and Suspended
-- while the annotation kuberay.io/upgrade-paused is "true".
-- Only Argo CD's default libraries are used (no string library).
local hs = {}
local meta = obj.metadata or {}
local labels = meta.labels or {}
local annotations = meta.annotations or {}
local status = obj.status or {}

local function current(parent)
  if meta.generation == nil then
    return true
  end
  for _, c in ipairs(parent.conditions or {}) do
    if c.observedGeneration == nil or c.observedGeneration == meta.generation then
      return true
    end
  end
  return false
end

local function parents()
  local seen = false
  for _, parent in ipairs(status.parents or {}) do
    local conditions = parent.conditions or {}
    if #conditions > 0 and current(parent) then
      seen = true
      local name = (parent.parentRef or {}).name or ""
      for _, kind in ipairs({"ResolvedRefs", "Accepted"}) do
        for _, c in ipairs(conditions) do
          if c.type == kind and c.status == "False" then
            return "Degraded", "Parent " .. name .. ": " .. (c.message or (kind .. " is False"))
          end
        end
      end
      for _, c in ipairs(conditions) do
        if c.type == "Programmed" and c.status ~= "True" then
          return "Progressing", "Parent " .. name .. ": " .. (c.message or "not programmed yet")
        end
      end
    end
  end
  if not seen then
    return "Progressing", "Waiting for HTTPRoute status"
  end
  return "Healthy", "HTTPRoute is healthy"
end

local verdict, message = parents()
if verdict ~= "Degraded" and labels["app.kubernetes.io/managed-by"] == "kuberay-render"
    and labels["kuberay.io/origin-kind"] == "RayService" then
  local split = ""
  local count = 0
  for _, rule in ipairs((obj.spec or {}).rules or {}) do
    for _, ref in ipairs(rule.backendRefs or {}) do
      local weight = ref.weight
      if weight == nil then
        weight = 1
      end
      count = count + 1
      if split ~= "" then
        split = split .. ", "
      end
      split = split .. (ref.name or "") .. " " .. tostring(weight)
    end
  end
  local origin = labels["kuberay.io/origin-name"] or meta.name or ""
  if annotations["kuberay.io/upgrade-paused"] == "true" then
    verdict, message = "Suspended", "RayService " .. origin .. ": upgrade paused (" .. split .. ")"
  elseif count > 1 then
    verdict, message = "Progressing", "RayService " .. origin .. ": upgrade in progress, traffic " .. split
  end
end
hs.status = verdict
hs.message = message
return hs
