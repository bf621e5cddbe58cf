-- An A/B of the CUDA kernel switches (docs/ckks.md, "Kernel switches") in one run: ckks.lua
-- once per setting, on the same machine one after the other, then each operation's replay
-- time side by side with the ratio to the first setting.
--
--   scripts/run scripts/bench/ab.lua VAR=value VAR=value [...] [-- ckks.lua options]
--
-- Each setting is a space-free list of VAR=value pairs joined by commas
-- (FHELIUM_CUDA_FOLD=1,FHELIUM_CUDA_RAW=0), applied to that run's environment only; an empty
-- value ("FHELIUM_CUDA_FOLD=") unsets the variable. The ckks.lua options default to
-- `--slots 8192,32768 --matvec 8` (the GPU targets' presets). Each run's full output is
-- printed first (its tables, its targets and the "kernel switches:" line that says which side
-- it is), then one table: per operation and preset the replay ms of every setting and its
-- ratio to the first (eager where an operation is not replayed), the matrix-vector program's,
-- and on a GPU the targets' figures. A ratio below 1 is faster than the first setting.
-- Absolute times only mean something on the GPU machine; a setting that fails to run
-- stops the script (exit 1) with its output.
local usage = "usage: ab.lua VAR=value[,VAR=value...] VAR=value[,...] [...] [-- ckks.lua options]\n"

local settings, bench_args = {}, {}
do
  local i, rest = 1, false
  while arg[i] do
    local a = arg[i]
    if rest then
      bench_args[#bench_args + 1] = a
    elseif a == "--" then
      rest = true
    else
      local s = {}
      for pair in a:gmatch("[^,]+") do
        local k, v = pair:match("^([%a_][%w_]*)=([%w_.%-]*)$")
        if not k then
          io.stderr:write(("ab.lua: %q is not VAR=value (a variable name, then a value of letters, digits, "
            .. "'_', '.' or '-')\n"):format(pair), usage)
          os.exit(2)
        end
        s[#s + 1] = { k, v }
      end
      if #s == 0 then
        io.stderr:write("ab.lua: an empty setting\n", usage)
        os.exit(2)
      end
      settings[#settings + 1] = { text = a, pairs = s }
    end
    i = i + 1
  end
end
if #settings < 2 then
  io.stderr:write(("ab.lua: %d setting%s given, two or more expected\n"):format(#settings, #settings == 1 and "" or "s"),
    usage)
  os.exit(2)
end
if #bench_args == 0 then bench_args = { "--slots", "8192,32768", "--matvec", "8" } end

local bin = os.getenv("FHELIUM_BIN")
if not bin or bin == "" then
  io.stderr:write("ab.lua: FHELIUM_BIN is not set (run it through scripts/run)\n")
  os.exit(2)
end
local script = (arg[0]:match("^(.*)/") or ".") .. "/ckks.lua"

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- ckks.lua's output -> { ops = {[name] = {[slots] = ms}}, order = {names}, slots = {...},
-- matvec = {[key] = ms}, mv_order, targets = {[label] = value}, t_order }
local function parse(text)
  local r = { ops = {}, order = {}, slots = {}, matvec = {}, mv_order = {}, targets = {}, t_order = {} }
  local in_targets = false
  for line in text:gmatch("[^\n]*") do
    if line:match("^operation%s+|") then
      for s in line:gmatch("slots (%d+):") do r.slots[#r.slots + 1] = tonumber(s) end
    elseif #r.slots > 0 and line:match("^[%w_]+%s+|") and not in_targets then
      local name = line:match("^([%w_]+)")
      local cells = {}
      for cell in line:gmatch("|([^|]*)") do cells[#cells + 1] = cell end
      if not r.ops[name] then r.order[#r.order + 1] = name end
      r.ops[name] = {}
      for k, cell in ipairs(cells) do
        local eager, replay = cell:match("^%s*(%S+)%s+(%S+)")
        r.ops[name][r.slots[k]] = tonumber(replay) or tonumber(eager)
      end
    end
    local slots, size, eager, replay = line:match("^%s+(%d+) slots, size%s+(%d+):%s+(%S+) /%s+(%S+)")
    if slots then
      local key = ("matrix-vector %s slots size %s"):format(slots, size)
      r.mv_order[#r.mv_order + 1] = key
      local rep = tonumber(replay)
      r.matvec[key] = (rep and rep >= 0) and rep or tonumber(eager)
    end
    if line:match("^GPU targets %(issue") then
      in_targets = true
    elseif in_targets then
      local label, value = line:match("^  (.-)%s+(%d+%.%d+)%s+FHElium 0%.30")
      if label then
        r.t_order[#r.t_order + 1] = label
        r.targets[label] = tonumber(value)
      end
      if line == "" or line:match("^GPU targets:") then in_targets = false end
    end
  end
  return r
end

local runs = {}
for k, s in ipairs(settings) do
  -- env's options (-u) before its assignments
  local unset, set = {}, {}
  for _, p in ipairs(s.pairs) do
    if p[2] == "" then unset[#unset + 1] = "-u " .. p[1] else set[#set + 1] = p[1] .. "=" .. p[2] end
  end
  local args = {}
  for _, a in ipairs(bench_args) do args[#args + 1] = quote(a) end
  -- the exit status as the output's last line (LuaJIT's popen close does not return it)
  local cmd = ("env %s %s %s %s %s 2>&1; echo \"ab.lua exit $?\""):format(table.concat(unset, " "),
    table.concat(set, " "), quote(bin), quote(script), table.concat(args, " "))
  io.write(("==== setting %d: %s\n"):format(k, s.text))
  io.flush()
  local p = assert(io.popen(cmd))
  local text = p:read("*a")
  p:close()
  local status = text:match("ab%.lua exit (%d+)\n$")
  text = text:gsub("ab%.lua exit %d+\n$", "")
  io.write(text)
  if status ~= "0" then
    io.stderr:write(("ab.lua: ckks.lua failed under %s (exit %s)\n"):format(s.text, tostring(status)))
    os.exit(1)
  end
  runs[k] = parse(text)
end

-- the comparison: one column per setting, each after the first with its ratio to the first
local a = runs[1]
local head = ("%-44s"):format("replay ms (eager where not replayed)")
for k, s in ipairs(settings) do
  head = head .. (" | %-22s"):format(s.text:sub(1, 22))
end
io.write("\n", ("A/B of %d settings (ckks.lua %s):\n"):format(#settings, table.concat(bench_args, " ")), head, "\n",
  ("-"):rep(#head), "\n")
local function row(label, values)
  local line = ("%-44s"):format(label)
  for k, v in ipairs(values) do
    if k == 1 then
      line = line .. (" | %12s %9s"):format(v and ("%.4f"):format(v) or "-", "")
    else
      local ratio = (v and values[1] and values[1] > 0) and ("%.3fx"):format(v / values[1]) or "-"
      line = line .. (" | %12s %9s"):format(v and ("%.4f"):format(v) or "-", ratio)
    end
  end
  io.write(line, "\n")
end
for _, s in ipairs(a.slots) do
  for _, name in ipairs(a.order) do
    local values = {}
    for k, r in ipairs(runs) do values[k] = r.ops[name] and r.ops[name][s] end
    row(("%s, %d slots"):format(name, s), values)
  end
end
for _, key in ipairs(a.mv_order) do
  local values = {}
  for k, r in ipairs(runs) do values[k] = r.matvec[key] end
  row(key, values)
end
for _, label in ipairs(a.t_order) do
  local values = {}
  for k, r in ipairs(runs) do values[k] = r.targets[label] end
  row(("target: %s"):format(label):sub(1, 44), values)
end
