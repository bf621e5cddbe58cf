-- After a CUDA error (docs/faults.md, "After a CUDA error"): a sticky error
-- (here fh.cuda._fault_kernel's out-of-bounds write, cudaErrorIllegalAddress)
-- is a CudaError naming the kernel and saying to restart; the device is
-- marked broken, and every later call that needs it fails fast with the
-- "unusable" CudaError; close(), the collector and exit neither hang nor
-- crash. The error poisons the process, so each case is a subprocess of the
-- built `fhelium` under `timeout 60`. The GPU cases are tagged #gpu; the CPU
-- twin marks cuda:0 broken with the test aid fh.cuda._mark_broken (what
-- fh__cuda_fail does on a sticky error) and checks the same fail-fast paths
-- without a GPU.
local H = require "spec.helpers"
local cli = require "spec.support.cli"

-- Prints "ok NAME SECONDS" for each call that raised the expected CudaError
-- quickly, "FAIL NAME why" otherwise; "first: MESSAGE" for the fault itself;
-- "done" before the exit of MODE.
local SCRIPT = [=[
local fh = require "fhelium"
local ex = require "fhelium.execution"
local ffi = require "ffi"
pcall(ffi.cdef, "typedef struct { long s; long ns; } sp_ts; int clock_gettime(int, sp_ts *);")
local ts = ffi.new("sp_ts")
local function now() ffi.C.clock_gettime(1, ts) return tonumber(ts.s) + tonumber(ts.ns) * 1e-9 end
local HOW, MODE = arg[1], arg[2] -- HOW: "fault" (a real fault on cuda:0) or "mark" (the CPU twin)
local function out(...) io.stdout:write(table.concat({ ... }, " "), "\n") io.stdout:flush() end

local UNUSABLE = "the CUDA context of cuda:0 is unusable after an earlier error %(cudaErrorIllegalAddress, detected by "
  .. (HOW == "fault" and "kernel 'fault'" or "fh%.cuda%._mark_broken") .. "%); restart the process"

-- what exists before the fault (on cuda:0 only with a GPU)
local gpu = HOW == "fault"
local S = {}
if gpu then
  S.a = fh.ones({ 1024 }, { device = "cuda:0" })
  S.b = fh.full({ 1024 }, 2, { device = "cuda:0" })
  S.e = fh.CkksEngine({ log_n = 10, q_bits = { 40, 40, 60 }, p_bits = { 60 }, allow_insecure = true },
    { seed = 5, device = "cuda:0" })
  S.sk = S.e:create_secret_key()
  S.pk = S.e:create_public_key(S.sk)
  S.rlk = S.e:create_relinearization_key(S.sk)
  S.ct = S.e:coefficient_domain_to_ntt_domain(S.e:encrypt_message({ 0.5, 0.25 }, S.pk))
  S.prog = ex.CudaGraphProgram.capture(function(x)
    return S.e:rescale_to_next_level(S.e:relinearize(S.e:multiply(x, x), S.rlk))
  end, { example_inputs = { S.ct }, warmup = 1 })
  S.prog:replay({ S.ct })
  S.buf = ex.ReusableValueBuffer.like(S.ct, { device = "cuda:0" })
  S.host = fh.ones({ 1024 }, { pin_memory = true })
  S.stream = fh.cuda.Stream()
  S.event = S.stream:record_event()
  local ok, err = pcall(fh.cuda._fault_kernel)
  if ok then out("FAIL fault the fault kernel returned") os.exit(5) end
  out("first: " .. tostring(err))
  if not fh.errors.is(err, "CudaError") then out("FAIL fault not a CudaError: " .. tostring(err)) end
else
  out("first: marked " .. tostring(fh.cuda._mark_broken(0, "cudaErrorIllegalAddress")))
  out("again: " .. tostring(fh.cuda._mark_broken(0, "cudaErrorLaunchFailure")))
end

local function expect(name, fn)
  local t0 = now()
  local ok, err = pcall(fn)
  local dt = now() - t0
  if ok then return out("FAIL " .. name .. " succeeded") end
  if not fh.errors.is(err, "CudaError") then return out("FAIL " .. name .. " raised " .. tostring(err)) end
  if not tostring(err.message):find(UNUSABLE) then return out("FAIL " .. name .. " message: " .. err.message) end
  if dt > 1 then return out(("FAIL %s took %.3f s"):format(name, dt)) end
  out(("ok %s %.6f"):format(name, dt))
end

-- every build: what checks the device first
expect("fh.zeros", function() return fh.zeros({ 4 }, { device = "cuda:0" }) end)
expect("fh.tensor", function() return fh.tensor({ 1, 2 }, { device = "cuda:0" }) end)
expect("Tensor:to", function() return fh.ones({ 4 }):to("cuda:0") end)
expect("fh.CkksEngine", function()
  return fh.CkksEngine({ log_n = 10, q_bits = { 40, 40, 60 }, p_bits = { 60 }, allow_insecure = true },
    { device = "cuda:0" })
end)
if fh.cuda.device_count() > 0 then
  expect("fh.cuda.synchronize", function() fh.cuda.synchronize(0) end)
  expect("fh.cuda.Stream", function() return fh.cuda.Stream() end)
end
if gpu then
  expect("fh.add", function() return fh.add(S.a, S.b) end)
  expect("Tensor:cpu", function() return S.a:cpu() end)
  expect("Tensor:copy_", function() S.a:copy_(S.host) end)
  expect("Tensor:tolist", function() return S.b:tolist() end)
  expect("Stream:synchronize", function() S.stream:synchronize() end)
  expect("Event:synchronize", function() S.event:synchronize() end)
  expect("CkksEngine:multiply", function() return S.e:multiply(S.ct, S.ct) end)
  expect("CkksEngine:decrypt_message", function() return S.e:decrypt_message(S.ct, S.sk) end)
  expect("prog:replay", function() return S.prog:replay({ S.ct }) end)
  expect("buf:copy_from", function() return S.buf:copy_from(S.ct) end)
end
-- the CPU is not affected
local c = fh.add(fh.ones({ 3 }), fh.ones({ 3 }))
if c:tolist()[3] ~= 2 then out("FAIL cpu work after the error") else out("ok cpu 0") end
-- close and the collector: they return (errors, if any, are CudaErrors)
if gpu then
  -- close succeeds: a broken context runs nothing again, so nothing is left to wait for
  local t0 = now()
  local ok, err = pcall(function() S.prog:close() end)
  local ok2, err2 = pcall(function() S.buf:close() end)
  if not ok then out("FAIL close prog:close raised " .. tostring(err))
  elseif not ok2 then out("FAIL close buf:close raised " .. tostring(err2))
  elseif not (S.prog:is_closed() and S.buf:is_closed()) then out("FAIL close not closed")
  else out(("ok close %.6f"):format(now() - t0)) end
end
S = nil
collectgarbage("collect")
collectgarbage("collect")
out("done")
if MODE == "exit3" then os.exit(3)
elseif MODE == "error" then error("cuda fault spec: the expected error")
end
]=]

local script = cli.tempfile(SCRIPT, ".lua")

local CALLS_ANY = { "fh.zeros", "fh.tensor", "Tensor:to", "fh.CkksEngine", "cpu" }
local CALLS_GPU = { "fh.cuda.synchronize", "fh.cuda.Stream", "fh.add", "Tensor:cpu", "Tensor:copy_", "Tensor:tolist",
  "Stream:synchronize", "Event:synchronize", "CkksEngine:multiply", "CkksEngine:decrypt_message", "prog:replay",
  "buf:copy_from", "close" }

local function run(how, mode, code)
  local r = cli.sh(("timeout 60 %s %s %s %s"):format(cli.quote(cli.bin), cli.quote(script), how, mode))
  local what = ("%s %s: exit %s\nstdout:\n%s\nstderr:\n%s"):format(how, mode, tostring(r.code), r.stdout, r.stderr)
  assert(r.code ~= 124, "timed out: " .. what)
  assert(r.code == code, ("expected exit status %d: %s"):format(code, what))
  assert(not r.stdout:find("FAIL"), what)
  assert(r.stdout:find("\ndone\n"), what)
  local calls = { unpack(CALLS_ANY) }
  if how == "fault" then for _, n in ipairs(CALLS_GPU) do calls[#calls + 1] = n end end
  for _, n in ipairs(calls) do
    assert(r.stdout:find("\nok " .. n:gsub("%p", "%%%0") .. " [%d.]+\n"), n .. " did not fail fast: " .. what)
  end
  if mode == "error" then
    assert(r.stderr:find("^fhelium: [^\n]*cuda fault spec: the expected error"), what)
  else
    assert(r.stderr == "", what)
  end
  return r, what
end

describe("after a sticky CUDA error", function()
  teardown(function() os.remove(script) end)

  it("cpu twin: a device marked broken fails fast with the unusable CudaError; the CPU is unaffected", function()
    local r, what = run("mark", "normal", 0)
    assert(r.stdout:find("^first: marked true\nagain: false\n"), what)
  end)
  it("cpu twin: exits with the expected status (os.exit(3), an error)", function()
    run("mark", "exit3", 3)
    run("mark", "error", 1)
  end)

  H.gpu_it("the fault kernel raises CudaError naming it; later calls fail fast; close, GC and exit return", function()
    local r, what = run("fault", "normal", 0)
    assert(r.stdout:find("^first: CudaError: fh%.cuda%._fault_kernel: kernel 'fault': cudaErrorIllegalAddress %([^\n]*%): " ..
      "the CUDA context of cuda:0 is unusable after this error; restart the process\n"), what)
  end)
  H.gpu_it("after the fault: os.exit(3) and an uncaught error exit with their status", function()
    run("fault", "exit3", 3)
    run("fault", "error", 1)
  end)
end)
