-- Argo CD health check for tensorkiln.dev/CompileJob
-- (argocd-cm key: resource.customizations.health.tensorkiln.dev_CompileJob).
-- From the operator's status: phase (Pending, Running, Succeeded, Failed), observedGeneration,
-- reason/message and the Compiled and Scheduled conditions. A CompileJob on a node simulated by
-- kwok (status.simulatedNode) never finishes: it stays Progressing, and the message says so.
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

local compiled = find(status.conditions, "Compiled")
local scheduled = find(status.conditions, "Scheduled")
local phase = status.phase

if phase == "Succeeded" then
  hs.status = "Healthy"
  if compiled ~= nil and compiled.message ~= nil then
    hs.message = compiled.message
  else
    hs.message = "Engine published"
  end
elseif phase == "Failed" then
  hs.status = "Degraded"
  hs.message = (status.reason or "Failed") .. ": " .. (status.message or "the compile failed")
else
  hs.status = "Progressing"
  if scheduled ~= nil and scheduled.status == "False" and scheduled.message ~= nil then
    hs.message = phase .. ": " .. scheduled.message
  elseif compiled ~= nil and compiled.message ~= nil then
    hs.message = phase .. ": " .. compiled.message
  else
    hs.message = phase
  end
end
return hs
