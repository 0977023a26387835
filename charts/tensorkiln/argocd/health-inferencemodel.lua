-- Argo CD health check for tensorkiln.dev/InferenceModel
-- (argocd-cm key: resource.customizations.health.tensorkiln.dev_InferenceModel).
-- From the operator's status: phase (Pending, Compiling, Deploying, Ready, Degraded, Failed, Simulated),
-- observedGeneration and the Ready condition. Health says whether the model is served, not how
-- it performs under load: an SLO missed at maxReplicas is in the message, not a Degraded state.
-- Uses Lua's base and table libraries only (Argo CD runs health checks without the others).
local hs = {}

local function find(conditions, wanted)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if c.type == wanted then
      return c
    end
  end
  return nil
end

local function message_of(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

local status = obj.status
if status == nil or status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report status"
  return hs
end

local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. generation
  return hs
end

local ready = find(status.conditions, "Ready")
local phase = status.phase

if phase == "Ready" then
  hs.status = "Healthy"
  hs.message = message_of(ready, "Serving")
  local met = find(status.conditions, "SLOMet")
  if met ~= nil and met.status == "False" then
    hs.message = hs.message .. "; SLO not met: " .. message_of(met, met.reason)
  elseif status.sloSummary ~= nil then
    hs.message = hs.message .. "; " .. status.sloSummary
  end
elseif phase == "Degraded" or phase == "Failed" then
  hs.status = "Degraded"
  hs.message = phase .. ": " .. message_of(ready, "see status.conditions")
else
  -- Pending (no matching hardware yet), Compiling, Deploying, Simulated (kwok pools: nothing compiles there).
  hs.status = "Progressing"
  hs.message = phase .. ": " .. message_of(ready, "in progress")
end
if status.targetSummary ~= nil then
  hs.message = hs.message .. " (" .. status.targetSummary .. ")"
end
return hs
