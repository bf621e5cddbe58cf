-- The fault sweep's fixed workload (scripts/faults, docs/faults.md). Run by a
-- fault build (-DFHELIUM_FAULTS=ON: fh._faults exists):
--   fhelium spec/support/faults_workload.lua count
--     runs every step once without a fault; prints "count STEP alloc=N io=M"
--   fhelium spec/support/faults_workload.lua sweep SITE STEP FROM TO [STRIDE]
--     for n = FROM..TO: arms the n-th call of SITE ("alloc" or "io") inside
--     STEP (every STRIDE-th n), runs the step, disarms, and checks; prints one line
--     per n: "run SITE STEP n ok" (the fault fired, the step succeeded all the
--     same), "run SITE STEP n error KIND" (a clean MemoryError/IOError naming
--     the function, everything it touched unchanged and usable) or
--     "run SITE STEP n FAIL why"; stops after "end SITE STEP n" when the step
--     ran without reaching its n-th call (no fault left to inject).
-- Every line is flushed; the exit status is 1 when a run FAILed. The process
-- returns normally, so that LeakSanitizer checks it at exit.
local fh = require "fhelium"
local ex = require "fhelium.execution"

assert(fh._faults, "faults_workload.lua needs a fault build (-DFHELIUM_FAULTS=ON)")

local function out(...)
  io.stdout:write(table.concat({ ... }, " "), "\n")
  io.stdout:flush()
end

local tmpdir = os.getenv("FHELIUM_FAULTS_TMP") or os.tmpname() .. ".d"
os.execute("mkdir -p '" .. tmpdir .. "'")

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- ---- shared state (built without faults) ----------------------------------
-- FHELIUM_FAULTS_DEVICE=cuda:0 (the GPU sweep): the engine, buffers and programs on that device
local DEV = os.getenv("FHELIUM_FAULTS_DEVICE") or "cpu"
local Program = DEV == "cpu" and ex.HostGraphProgram or ex.CudaGraphProgram
local BITS = { log_n = 10, q_bits = { 40, 40, 60 }, p_bits = { 60 }, allow_insecure = true }
local S = {}
S.engine = fh.CkksEngine(BITS, { seed = 7, device = DEV })
S.sk = S.engine:create_secret_key()
S.pk = S.engine:create_public_key(S.sk)
S.rlk = S.engine:create_relinearization_key(S.sk)
S.rk = S.engine:create_rotation_key(S.sk, 1)
S.msg = { 0.5, -0.25, 0.125, 1.0 }
S.ct = S.engine:coefficient_domain_to_ntt_domain(S.engine:encrypt_message(S.msg, S.pk))
S.ct2 = S.engine:coefficient_domain_to_ntt_domain(S.engine:encrypt_message({ 0.25, 0.5, -0.5, 0.75 }, S.pk))

local function near(got, want, tol, what)
  for i = 1, #want do
    local g = got[i]
    if type(g) ~= "number" then g = tonumber(g) end
    if math.abs(g - want[i]) > tol then
      error(("%s: slot %d is %s, expected %s"):format(what, i, tostring(g), tostring(want[i])), 0)
    end
  end
end

local function slots(t, n)
  local r = {}
  local l = t:tolist()
  if type(l[1]) == "table" and type(l[1][1]) == "number" and #l[1] == 2 and n and #l ~= 2 then
    for i = 1, n do r[i] = l[i][1] end
  else
    for i = 1, n do r[i] = type(l[i]) == "table" and l[i][1] or l[i] end
  end
  return r
end

-- the CKKS program: (x * x) relinearized, rescaled, rotated by one, plus x rescaled-level copy
local function program(x)
  local e = S.engine
  local y = e:rescale_to_next_level(e:relinearize(e:multiply(x, x), S.rlk))
  return e:rotate_by_step(y, 1, S.rk)
end
local function program_expect(m)
  local r = {}
  local n = #m
  for j = 1, n do r[j] = (m[j - 1] or 0) ^ 2 end
  return r
end

-- ---- steps -----------------------------------------------------------------
-- Each step: run() does the work and checks its result (raises a plain
-- string on a wrong result); check() (optional) verifies, after a failed
-- run, that the objects the step touched are unchanged and usable.
local steps, order = {}, {}
local function step(name, t)
  steps[name] = t
  order[#order + 1] = name
end

step("tensors", {
  run = function()
    local a = fh.arange(12, { dtype = "float64", device = DEV }):view({ 3, 4 })
    local b = fh.ones({ 3, 4 }, { dtype = "float64", device = DEV })
    local c = fh.add(a, b):transpose(1, 2):clone()
    local u = fh.tensor({ { 1, 2, 3 } }, { dtype = "uint64", device = DEV })
    local r = fh.rns.mul(u, u, { 7ULL })
    local s = fh.sum(c)
    local v = type(s) == "number" and s or tonumber(s:item())
    if v ~= 78 then error("tensors: sum " .. tostring(v), 0) end
    if tonumber(r:tolist()[1][3]) ~= 2 then error("tensors: rns.mul", 0) end
  end,
})

step("ckks_keys", {
  run = function()
    local e = fh.CkksEngine(BITS, { seed = 11, device = DEV })
    local sk = e:create_secret_key()
    local pk = e:create_public_key(sk)
    local rlk = e:create_relinearization_key(sk)
    local rk = e:create_rotation_key(sk, 2)
    local ct = e:coefficient_domain_to_ntt_domain(e:encrypt_message({ 0.5, 0.25 }, pk))
    local y = e:rotate_by_step(e:rescale_to_next_level(e:relinearize(e:multiply(ct, ct), rlk)), 2, rk)
    local d = slots(e:decrypt_message(y, sk, { is_real = true }), 4)
    near(d, { 0, 0, 0.25, 0.0625 }, 1e-3, "ckks_keys")
  end,
})

step("ckks_eval", {
  run = function()
    local e = S.engine
    local pt = e:encode({ 2, 2, 2, 2 })
    local a = e:add(S.ct, S.ct2)
    local p = e:multiply_plaintext(a, e:prepare_plaintext_for_multiplication(pt))
    p = e:rescale_to_next_level(p)
    local d = slots(e:decrypt_message(p, S.sk, { is_real = true }), 4)
    near(d, { 1.5, 0.5, -0.75, 3.5 }, 1e-3, "ckks_eval")
    local many = e:rotate_many(S.ct, { 1, 1 }, { S.rk, S.rk })
    near(slots(e:decrypt_message(many[2], S.sk, { is_real = true }), 4), { 0, 0.5, -0.25, 0.125 }, 1e-3,
      "ckks_eval rotate_many")
  end,
  check = function()
    -- the shared engine and its inputs are unchanged
    near(slots(S.engine:decrypt_message(S.ct, S.sk, { is_real = true }), 4), S.msg, 1e-3, "ckks_eval: S.ct")
  end,
})

local vpath = tmpdir .. "/value.fh"
step("value_file", {
  setup = function()
    fh.save(S.ct2, vpath, { overwrite = true })
    S.old_file = read_file(vpath)
  end,
  run = function()
    fh.save(S.ct, vpath, { overwrite = true })
    local back = fh.load(vpath)
    if not back:equal(S.ct) then error("value_file: loaded value differs", 0) end
    local bytes = fh.serialize({ S.ct, S.ct2 })
    local t = fh.deserialize(bytes)
    if not t[2]:equal(S.ct2) then error("value_file: deserialized value differs", 0) end
    fh.save(S.ct2, vpath, { overwrite = true })
  end,
  check = function()
    -- a failed save leaves the old file (the step's last good state, or its
    -- initial one) intact, and no temporary file beside it
    local now = read_file(vpath)
    if now ~= S.old_file then
      local ok, v = pcall(fh.load, vpath)
      if not (ok and (v:equal(S.ct) or v:equal(S.ct2))) then
        error("value_file: a failed save left a file that is neither the old nor the new value", 0)
      end
    end
    local p = io.popen("ls -a '" .. tmpdir .. "'")
    local listing = p:read("*a")
    p:close()
    if listing:find("%.tmp%-") then error("value_file: a failed save left a temporary file: " .. listing, 0) end
  end,
})

step("buffer", {
  setup = function()
    S.buf = ex.ReusableValueBuffer.like(S.ct, { device = DEV })
    S.buf:copy_from(S.ct)
  end,
  run = function()
    local b = ex.ReusableValueBuffer.like({ S.ct, fh.zeros({ 5 }) }, { device = DEV })
    local h = b:copy_from({ S.ct2, fh.ones({ 5 }) })
    h:synchronize()
    if not b.value[1]:equal(S.ct2) then error("buffer: new buffer content", 0) end
    b:close()
    S.buf:copy_from(S.ct2):synchronize()
    if not S.buf.value:equal(S.ct2) then error("buffer: copy_from ct2", 0) end
    S.buf:copy_from(S.ct):synchronize()
    if not S.buf.value:equal(S.ct) then error("buffer: copy_from ct", 0) end
  end,
  check = function()
    -- never half-changed: the long-lived buffer holds one of the two values
    local v = S.buf.value
    if not (v:equal(S.ct) or v:equal(S.ct2)) then error("buffer: a failed copy_from left a half-changed buffer", 0) end
  end,
})

step("program", {
  setup = function()
    S.prog = Program.capture(program, { example_inputs = { S.ct }, warmup = 1 })
    S.want_ct = program_expect(S.msg)
  end,
  run = function()
    local p = Program.capture(program, { example_inputs = { S.ct2 }, warmup = 1 })
    local o = p:replay({ S.ct }, { copy_output = true })
    near(slots(S.engine:decrypt_message(o, S.sk, { is_real = true }), 4), S.want_ct, 1e-3, "program: new replay")
    p:close()
    for _ = 1, 2 do
      local r = S.prog:replay({ S.ct }, { copy_output = true })
      near(slots(S.engine:decrypt_message(r, S.sk, { is_real = true }), 4), S.want_ct, 1e-3, "program: replay")
    end
    local h = S.prog:copy_inputs_from({ S.ct })
    local r = S.prog:replay_prepared({ copy_handle = h, copy_output = true })
    near(slots(S.engine:decrypt_message(r, S.sk, { is_real = true }), 4), S.want_ct, 1e-3, "program: prepared")
  end,
  check = function()
    if S.prog:is_closed() then error("program: a failed replay closed the program", 0) end
    local r = S.prog:replay({ S.ct }, { copy_output = true })
    near(slots(S.engine:decrypt_message(r, S.sk, { is_real = true }), 4), S.want_ct, 1e-3, "program: after a fault")
  end,
})

local tpath = tmpdir .. "/trace.json"
step("trace", {
  run = function()
    fh.trace.start()
    local ok, err = pcall(function() S.engine:add(S.ct, S.ct2) end)
    local tr = fh.trace.stop()
    if not ok then error(err, 0) end
    tr:save(tpath)
    local s = read_file(tpath)
    if not s or not s:find("traceEvents", 1, true) then error("trace: file content", 0) end
  end,
  check = function()
    if fh.trace.active() then error("trace: a fault left a trace running", 0) end
  end,
})

-- ---- running ----------------------------------------------------------------
local function counts() local c = fh._faults() return c.alloc, c.io end

local function run_clean(name)
  fh._faults_arm("alloc", 0)
  fh._faults_arm("io", 0)
  steps[name].run()
  local a, i = counts()
  return a, i
end

-- an error a fault may cause: MemoryError for alloc, IOError for io (or a
-- descendant), an fhelium error object whose message names the function
local function clean_error(site, err)
  if not fh.errors.is_error(err) then return false, "not an fhelium error object: " .. tostring(err) end
  local want = site == "alloc" and "MemoryError" or "IOError"
  if not fh.errors.is(err, want) then
    -- a capture wraps the original error: its cause must be the fault's kind
    if not (fh.errors.is(err, "CudaGraphCaptureError") and err.cause and fh.errors.is(err.cause, want)) then
      return false, ("%s, expected %s: %s"):format(err.kind, want, tostring(err))
    end
  end
  if not err.message:find("^[%a_][%w_]*[%.:][%w_.:]*: ") and not err.message:find("^[%a_][%w_]*: ") then
    return false, "the message does not begin with the function's name: " .. err.message
  end
  return true
end

local mode = arg[1]
for _, name in ipairs(order) do
  if steps[name].setup then steps[name].setup() end
end
collectgarbage()
collectgarbage()

local failed = false
if mode == "count" then
  for _, name in ipairs(order) do
    run_clean(name) -- the first run fills caches (contexts, tables, pools)
    local a, i = run_clean(name)
    out("count", name, "alloc=" .. a, "io=" .. i)
  end
elseif mode == "sweep" then
  local site, name, from, to, stride = arg[2], arg[3], tonumber(arg[4]), tonumber(arg[5]), tonumber(arg[6] or 1)
  local st = assert(steps[name], "unknown step " .. tostring(name))
  assert(site == "alloc" or site == "io", "site: alloc or io")
  run_clean(name)
  for n = from, to, stride do
    out("begin", site, name, n)
    fh._faults_arm(site == "alloc" and "io" or "alloc", 0)
    local before = fh._faults()[site .. "_injected"]
    fh._faults_arm(site, n)
    local tb
    local ok, err = xpcall(st.run, function(e)
      tb = debug.traceback(tostring(e), 2)
      return e
    end)
    local fired = fh._faults()[site .. "_injected"] > before
    fh._faults_arm(site, 0)
    local verdict
    if not fired then
      if not ok then
        verdict = "FAIL the step failed without a fault: " .. tostring(err)
      else
        out("end", site, name, n)
        break
      end
    elseif ok then
      verdict = "ok"
    else
      local good, why = clean_error(site, err)
      verdict = good and ("error " .. err.kind) or ("FAIL " .. why)
    end
    -- objects the step touched: unchanged and usable (check), and the step
    -- itself runs again without a fault
    if verdict:sub(1, 4) ~= "FAIL" then
      local cok, cerr = pcall(function()
        if st.check then st.check() end
        steps[name].run()
      end)
      if not cok then verdict = "FAIL after the fault: " .. tostring(cerr) end
    end
    collectgarbage()
    out("run", site, name, n, verdict)
    if verdict:sub(1, 4) == "FAIL" and tb then io.stderr:write("run ", site, " ", name, " ", n, ": ", tb, "\n") end
    if verdict:sub(1, 4) == "FAIL" then failed = true end
  end
else
  error("usage: faults_workload.lua count | sweep SITE STEP FROM TO", 0)
end

for _, name in ipairs(order) do
  if name == "buffer" then S.buf:close() end
  if name == "program" then S.prog:close() end
end
os.execute("rm -rf '" .. tmpdir .. "'")
if failed then os.exit(1, true) end
