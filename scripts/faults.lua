-- scripts/faults.lua BIN WORKLOAD: the driver of scripts/faults (run by plain
-- LuaJIT; the workload runs in the fault build BIN, one process per step and
-- site, continued after a crash; a process whose sanitizer reports an error
-- at exit, such as a leak, is bisected: each of its runs again alone).
local bin, workload = arg[1], arg[2]
local budget = tonumber(os.getenv("FHELIUM_FAULTS_BUDGET") or "") or 300
local stride = tonumber(os.getenv("FHELIUM_FAULTS_STRIDE") or "") or 1
local only = os.getenv("FHELIUM_FAULTS_STEPS")
local preload = os.getenv("FHELIUM_FAULTS_PRELOAD") or ""
local t0 = os.time()

local function now() return os.difftime(os.time(), t0) end

local function sh_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local tmp = os.tmpname()
-- run the workload with args; returns exit status, stdout lines, stderr text
local function run(args)
  local cmd = (preload ~= "" and ("env LD_PRELOAD=" .. sh_quote(preload) .. " ") or "") .. sh_quote(bin) .. " " ..
    sh_quote(workload)
  for _, a in ipairs(args) do cmd = cmd .. " " .. sh_quote(a) end
  cmd = "timeout 300 " .. cmd .. " 2>" .. sh_quote(tmp .. ".err") .. " >" .. sh_quote(tmp .. ".out")
  -- LuaJIT's os.execute returns the wait status (a number)
  local status = os.execute(cmd)
  local rc = type(status) == "number" and (status >= 256 and math.floor(status / 256) or status) or (status and 0 or 1)
  local lines = {}
  for l in io.lines(tmp .. ".out") do lines[#lines + 1] = l end
  local f = io.open(tmp .. ".err")
  local err = f and f:read("*a") or ""
  if f then f:close() end
  return rc, lines, err
end

local function sanitizer_report(err)
  return err:match("==%d+==ERROR: [%w]+Sanitizer[^\n]*") or err:match("[^\n]*: runtime error: [^\n]*")
end

local function excerpt(err)
  local s = sanitizer_report(err)
  local first = err:match("\n%s*#0 [^\n]*") or ""
  local frames = {}
  for fr in err:gmatch("\n%s*#%d+ 0x%x+ in ([^\n]+)") do
    if #frames < 6 and not fr:find("asan_", 1, true) and not fr:find("libsanitizer", 1, true) then
      frames[#frames + 1] = fr
    end
  end
  return (s or err:sub(-400)) .. (#frames > 0 and ("\n      at " .. table.concat(frames, "\n         ")) or first)
end

-- ---- count ---------------------------------------------------------------------
local rc, lines, err = run({ "count" })
local steps = {}
for _, l in ipairs(lines) do
  local name, a, i = l:match("^count (%S+) alloc=(%d+) io=(%d+)$")
  if name then steps[#steps + 1] = { name = name, alloc = tonumber(a), io = tonumber(i) } end
end
if rc ~= 0 or #steps == 0 or sanitizer_report(err) then
  io.write("faults: the workload failed without a fault (status ", tostring(rc), "):\n", err, "\n")
  io.write("\n0 passed, 1 failed, 0 skipped\n")
  os.exit(1)
end
local total = { alloc = 0, io = 0 }
io.write("faults: workload ", workload, ", ", #steps, " steps; sites per run without a fault:\n")
for _, s in ipairs(steps) do
  io.write(("  %-12s alloc %5d  io %3d\n"):format(s.name, s.alloc, s.io))
  total.alloc, total.io = total.alloc + s.alloc, total.io + s.io
end
io.write(("faults: %d alloc and %d io sites; budget %d s, stride %d\n"):format(total.alloc, total.io, budget, stride))
io.flush()

local wanted
if only and only ~= "" then
  wanted = {}
  for n in only:gmatch("[^,]+") do wanted[n] = true end
end

-- ---- sweep --------------------------------------------------------------------
local covered = { alloc = 0, io = 0 }
local outcomes = { ok = 0, error = 0 }
local failures = {}
local passed, failed, skipped = 0, 0, 0

local function sweep_one(site, s)
  local from, last = 1, math.max(s[site] * 4 + 200, 200)
  local bad = {}
  local reached_end = false
  local budget_hit = false
  while from <= last and not reached_end do
    if now() > budget then
      budget_hit = true
      break
    end
    local rc2, out, e = run({ "sweep", site, s.name, from, last, stride })
    local began, finished = nil, {}
    for _, l in ipairs(out) do
      local b = l:match("^begin %S+ %S+ (%d+)$")
      if b then began = tonumber(b) end
      local n, verdict = l:match("^run %S+ %S+ (%d+) (.*)$")
      if n then
        n = tonumber(n)
        finished[#finished + 1] = n
        covered[site] = covered[site] + 1
        if verdict:sub(1, 4) == "FAIL" then
          bad[#bad + 1] = ("%s %s #%d: %s"):format(site, s.name, n, verdict:sub(6))
        elseif verdict == "ok" then
          outcomes.ok = outcomes.ok + 1
        else
          outcomes.error = outcomes.error + 1
        end
      end
      if l:match("^end ") then reached_end = true end
    end
    local report = sanitizer_report(e)
    local crashed_at = not reached_end and began and (finished[#finished] ~= began) and began or nil
    if crashed_at then
      -- the process died in run `began`: record it, go on after it
      bad[#bad + 1] = ("%s %s #%d: the process died (status %s): %s"):format(site, s.name, crashed_at, tostring(rc2),
        excerpt(e))
      covered[site] = covered[site] + 1
      from = crashed_at + stride
      reached_end = false
    elseif report then
      -- a report at exit (a leak): which runs? each alone
      io.write(("faults: %s %s: a sanitizer report at exit; bisecting %d runs\n"):format(site, s.name, #finished))
      io.flush()
      local found = false
      for _, n in ipairs(finished) do
        local _, _, e1 = run({ "sweep", site, s.name, n, n })
        if sanitizer_report(e1) then
          bad[#bad + 1] = ("%s %s #%d: %s"):format(site, s.name, n, excerpt(e1))
          found = true
        end
      end
      if not found then bad[#bad + 1] = ("%s %s: %s (no single run reproduces it)"):format(site, s.name, excerpt(e)) end
    elseif not reached_end then
      bad[#bad + 1] = ("%s %s: the process ended (status %s) before the last site: %s"):format(site, s.name,
        tostring(rc2), e:sub(-600))
      break
    end
  end
  return bad, budget_hit
end

for _, site in ipairs({ "alloc", "io" }) do
  for _, s in ipairs(steps) do
    if (not wanted or wanted[s.name]) and s[site] > 0 then
      local c0 = covered[site]
      local bad, budget_hit = sweep_one(site, s)
      local n = covered[site] - c0
      if budget_hit and #bad == 0 and n < s[site] then
        skipped = skipped + 1
        io.write(("faults: %-5s %-12s %4d of %d sites, then the budget (%d s) ran out: skipped\n"):format(site,
          s.name, n, s[site], budget))
      elseif #bad > 0 then
        failed = failed + 1
        io.write(("faults: %-5s %-12s %4d sites, %d FAILED:\n"):format(site, s.name, n, #bad))
        for _, b in ipairs(bad) do
          io.write("    ", b, "\n")
          failures[#failures + 1] = b
        end
      else
        passed = passed + 1
        io.write(("faults: %-5s %-12s %4d sites, all clean (%.0f s)\n"):format(site, s.name, n, now()))
      end
      io.flush()
    end
  end
end
os.remove(tmp)
os.remove(tmp .. ".out")
os.remove(tmp .. ".err")

io.write(("faults: covered %d alloc sites (of %d) and %d io sites (of %d)%s; %d runs succeeded despite the fault, " ..
  "%d ended in a clean error; %d failures; %d s\n"):format(covered.alloc, total.alloc, covered.io, total.io,
  stride > 1 and (" at stride " .. stride) or "", outcomes.ok, outcomes.error, #failures, now()))
io.write(("\n%d passed, %d failed, %d skipped\n"):format(passed, failed, skipped))
os.exit(failed == 0 and 0 or 1)
