-- module: free-and-verify steps shared by free_gpus.lua and restart_service.lua
--
-- local gpufree = require("gpufree")
-- local rows, failures = gpufree.free{services = {"sglang.service"}, grace = "5s"}
--
-- free(opts) runs: stop opts.services -> wait for release (opts.release_timeout)
-- -> TERM the holders still there, wait opts.grace, KILL survivors -> verify
-- (opts.verify_timeout). It returns one flat row per GPU and a list of
-- failure strings (empty when every chosen GPU is back at its idle baseline).
-- Under `check` it stops and kills nothing and reports what it would do.
local M = {}

-- list turns a Lua list, a comma-separated string or nil into a list.
function M.list(v)
  if v == nil or v == "" then return {} end
  if type(v) == "table" then return v end
  local out = {}
  for item in string.gmatch(tostring(v), "[^,%s]+") do out[#out + 1] = item end
  return out
end

local function numlist(v)
  local out = {}
  for _, x in ipairs(M.list(v)) do
    local n = tonumber(x)
    if n == nil then error("gpu index " .. tostring(x) .. " is not a number") end
    out[#out + 1] = n
  end
  return out
end

local function truthy(v)
  return v == true or v == "true" or v == "yes" or v == "1" or v == 1
end

local function describe(h)
  local who = string.format("pid %d (%s", h.pid, h.comm)
  if h.unit and h.unit ~= "" then who = who .. ", " .. h.unit end
  if h.container and h.container ~= "" then who = who .. ", container " .. h.container end
  return who .. ")"
end

-- holders_by_gpu maps GPU index -> list of holders of that GPU.
local function holders_by_gpu(holders)
  local by = {}
  for _, h in ipairs(holders or {}) do
    for _, g in ipairs(h.gpus or {}) do
      by[g] = by[g] or {}
      table.insert(by[g], h)
    end
  end
  return by
end

local function key(h) return tostring(h.pid) .. "/" .. tostring(h.start_time) end

-- free_set says which GPUs of a wait_free result are free: no GPU holder and
-- used memory at or under the threshold the helper judged each GPU by (the
-- idle baseline unless threshold_mib was given).
local function free_set(r)
  local held = holders_by_gpu(r.holders)
  local free = {}
  for _, g in ipairs(r.gpus or {}) do
    -- As the helper judges: an unknown reading (-1) does not hold a GPU busy.
    free[g.index] = not held[g.index] and (g.used_mib < 0 or g.used_mib <= g.threshold_mib)
  end
  return free
end

function M.free(opts)
  opts = opts or {}
  local services = M.list(opts.services)
  local chosen = numlist(opts.gpus)
  local release_timeout = opts.release_timeout or "10s"
  local verify_timeout = opts.verify_timeout or "15s"
  local grace = opts.grace or "5s"
  local force = truthy(opts.force)
  local group = truthy(opts.group)
  local threshold = tonumber(opts.threshold_mib)

  local function wait(timeout, gpus)
    return gpu.wait_free{gpus = gpus or chosen, timeout = timeout, threshold_mib = threshold,
                         ignore_shared = true}
  end

  -- One poll now (a zero timeout would mean the helper's default); its
  -- readings are the GPUs' state before anything is touched.
  local first = wait("1ms")
  local rows, order = {}, {}
  local wanted = {}
  for _, c in ipairs(chosen) do wanted[c] = true end
  for _, g in ipairs(first.gpus or {}) do
    if #chosen == 0 or wanted[g.index] then
      rows[g.index] = {gpu = g.index, step = "", freed = false,
                       before_mib = g.used_mib, after_mib = g.used_mib,
                       holders = "", reason = ""}
      order[#order + 1] = g.index
    end
  end
  table.sort(order)

  local initial = {}
  for _, h in ipairs(first.holders or {}) do initial[key(h)] = true end
  local busy = {}
  if first.ok then
    for _, i in ipairs(order) do rows[i].step = "already-free"; rows[i].freed = true end
  else
    local by = holders_by_gpu(first.holders)
    for _, i in ipairs(order) do
      local names = {}
      for _, h in ipairs(by[i] or {}) do names[#names + 1] = describe(h) end
      rows[i].holders = table.concat(names, "; ")
      busy[i] = true
    end
    for i, free in pairs(free_set(first)) do
      if rows[i] and free then
        rows[i].step = "already-free"; rows[i].freed = true; busy[i] = nil
      end
    end
  end

  local result = first
  local stopped = {}
  -- GPUs held by what a stopped unit left in its cgroup (KillMode=process
  -- workers): waiting will not free them, the kill step will.
  local leftover_gpus = {}
  if not first.ok and #services > 0 then
    for _, unit in ipairs(services) do
      local s = systemd.stop(unit)
      local down = s.active_state == "inactive" or s.active_state == "failed"
      if s.would then
        log.info("would stop %s", unit)
      elseif not s.systemd then
        log.warn("cannot stop %s: %s", unit, s.reason or "no systemd")
      elseif s.ok then
        log.info("stopped %s", unit)
        stopped[#stopped + 1] = unit
      elseif down and (#(s.remaining or {}) > 0 or #(s.gpu_holders or {}) > 0) then
        local on = {}
        for _, h in ipairs(s.gpu_holders or {}) do
          local gs = {}
          for _, g in ipairs(h.gpus or {}) do
            gs[#gs + 1] = tostring(g)
            leftover_gpus[g] = true
          end
          on[h.pid] = #gs > 0 and (" on GPU " .. table.concat(gs, ",")) or ""
        end
        local who = {}
        for _, p in ipairs(s.remaining or {}) do
          who[#who + 1] = string.format("pid %d (%s)%s", p.pid, p.comm, on[p.pid] or "")
        end
        for _, h in ipairs(s.gpu_holders or {}) do
          local listed = false
          for _, p in ipairs(s.remaining or {}) do listed = listed or p.pid == h.pid end
          if not listed then who[#who + 1] = string.format("pid %d (%s)%s", h.pid, h.comm, on[h.pid]) end
        end
        log.warn("stopped %s, but it left %d process(es) in its cgroup: %s", unit, #who, table.concat(who, ", "))
        stopped[#stopped + 1] = unit
      else
        log.warn("stop %s: %s", unit, s.reason or s.active_state or "failed")
      end
    end
    if #stopped > 0 then
      -- Wait for the GPUs the stopped units held (by the holders' cgroups),
      -- not for those held by unrelated leftovers: the kill step is for them.
      -- Without unit attribution, wait for every busy GPU.
      local was_stopped, unit_gpus = {}, {}
      for _, u in ipairs(stopped) do was_stopped[u] = true end
      for _, h in ipairs(first.holders or {}) do
        if h.unit and was_stopped[h.unit] then
          for _, g in ipairs(h.gpus or {}) do unit_gpus[g] = true end
        end
      end
      local attributed = next(unit_gpus) ~= nil
      local waitfor = {}
      for _, i in ipairs(order) do
        if busy[i] and not leftover_gpus[i] and (unit_gpus[i] or not attributed) then
          waitfor[#waitfor + 1] = i
        end
      end
      if next(leftover_gpus) == nil and not attributed then
        result = wait(release_timeout)
        if result.ok then
          log.info("GPUs released %.1fs after the service stop", result.elapsed or 0)
        end
      else
        if #waitfor > 0 then
          local r = wait(release_timeout, waitfor)
          if r.ok then
            log.info("GPU %s released %.1fs after the service stop", table.concat(waitfor, ","), r.elapsed or 0)
          end
        end
        result = wait("1ms") -- every chosen GPU again, for the kill step
      end
    end
  end

  local released = free_set(result)
  for i in pairs(busy) do
    if #stopped > 0 and released[i] then
      rows[i].step = "service-stop"; rows[i].freed = true; busy[i] = nil
    end
  end

  local killed = {}
  if not result.ok then
    -- Holders of the chosen GPUs; holders of only nvidiactl/uvm keep no GPU
    -- memory and are left alone.
    local targets, seen = {}, {}
    for _, h in ipairs(result.holders or {}) do
      local mine = false
      for _, g in ipairs(h.gpus or {}) do if rows[g] then mine = true end end
      if mine and not seen[key(h)] and (force or not h.protected) then
        targets[#targets + 1] = h; seen[key(h)] = true
      elseif mine and h.protected and not force then
        log.warn("not killing protected %s: %s", describe(h), h.protected_why or "protected")
      end
    end
    if #targets > 0 then
      local k = gpu.kill(targets, {grace = grace, group = group, force = force})
      -- Name each process as the holders list did (with its unit or
      -- container); group and tree members were not in it.
      local target_of = {}
      for _, h in ipairs(targets) do target_of[h.pid] = h end
      for _, r in ipairs(k.results or {}) do
        killed[r.pid] = r
        local who = target_of[r.pid] and describe(target_of[r.pid])
                    or string.format("pid %d (%s)", r.pid, r.comm or "?")
        if r.outcome == "would-kill" then
          log.info("would kill %s", who)
        elseif r.outcome == "killed" or r.outcome == "exited" then
          log.info("%s %s after %s", r.outcome, who, table.concat(r.signals or {}, "+"))
        else
          log.warn("%s %s: %s", r.outcome, who, r.reason or "")
        end
      end
      if check then
        for i in pairs(busy) do rows[i].step = "would-kill" end
        return M.finish(rows, order, nil)
      end
      result = wait(verify_timeout)
    elseif check then
      for i in pairs(busy) do rows[i].step = #services > 0 and "would-stop" or "would-kill" end
      return M.finish(rows, order, nil)
    end
  elseif check then
    for i in pairs(busy) do rows[i].step = "would-stop" end
    return M.finish(rows, order, nil)
  end

  -- Verify: attribute what is still held, and why.
  local left = holders_by_gpu(result.holders)
  local done = free_set(result)
  for _, g in ipairs(result.gpus or {}) do
    if rows[g.index] then rows[g.index].after_mib = g.used_mib end
  end
  for i in pairs(busy) do
    local row = rows[i]
    if result.ok or done[i] then
      row.step = "kill"; row.freed = true
    else
      row.step = "not-freed"
      local why = {}
      for _, h in ipairs(left[i] or {}) do
        local k = killed[h.pid]
        if not initial[key(h)] then
          why[#why + 1] = "new-holder " .. describe(h)
        elseif h.protected and not force then
          why[#why + 1] = "protected " .. describe(h)
        elseif h.state == "D" or (k and k.outcome == "survived") then
          why[#why + 1] = "stuck in state " .. (h.state or "?") .. " " .. describe(h)
        else
          why[#why + 1] = "still held by " .. describe(h)
        end
      end
      if #why == 0 then
        why[1] = string.format("memory-held: %d MiB used with no holder", row.after_mib)
      end
      row.reason = table.concat(why, "; ")
    end
  end
  local failures = {}
  for _, i in ipairs(order) do
    if not rows[i].freed then
      failures[#failures + 1] = string.format("GPU %d: %s", i, rows[i].reason)
    end
  end
  return M.finish(rows, order, failures)
end

-- finish turns the rows into a list ordered by GPU index.
function M.finish(rows, order, failures)
  local out = {}
  for _, i in ipairs(order) do out[#out + 1] = rows[i] end
  return out, failures or {}
end

return M
