-- Shutdown: a process that ends (returning normally, os.exit(0), os.exit(3),
-- os.exit(0, true), os.exit(0, false), an uncaught error) while it holds pending non_blocking
-- copies, a captured program replayed and never closed, a ReusableValueBuffer
-- and copy handles nobody waited for, and CKKS values, exits with the expected
-- status, promptly, and writes nothing on stderr but the expected error
-- (docs/faults.md, "Shutdown"). fhelium's os.exit closes the Lua state
-- first (finalizers run) unless its second argument is false. Each case is a subprocess of the built
-- `fhelium` under `timeout 60`; the CPU cases always run, the cuda:0 ones are
-- tagged #gpu (a spin kernel keeps the device busy at exit, so that the copies
-- and replays are still queued when the process ends).
local H = require "spec.helpers"
local cli = require "spec.support.cli"

local SCRIPT = [=[
local fh = require "fhelium"
local ex = require "fhelium.execution"
local DEV, MODE = arg[1], arg[2]
local cuda = DEV ~= "cpu"
local Program = cuda and ex.CudaGraphProgram or ex.HostGraphProgram
local e = fh.CkksEngine({ log_n = 10, q_bits = { 40, 40, 60 }, p_bits = { 60 }, allow_insecure = true },
  { seed = 3, device = DEV })
sk = e:create_secret_key()
pk = e:create_public_key(sk)
rlk = e:create_relinearization_key(sk)
ct = e:coefficient_domain_to_ntt_domain(e:encrypt_message({ 0.5, -0.25, 0.125 }, pk))
local function f(x) return e:rescale_to_next_level(e:relinearize(e:multiply(x, x), rlk)) end
prog = Program.capture(f, { example_inputs = { ct }, warmup = 1 })
for _ = 1, 2 do out = prog:replay({ ct }) end
-- keep the device busy, so that what follows is still queued at exit
if cuda then fh.cuda._spin(300) end
for _ = 1, 3 do out = prog:replay({ ct }) end
h_in = prog:copy_inputs_from({ ct }, { non_blocking = true })
out2 = prog:replay_prepared({ copy_handle = h_in })
buf = ex.ReusableValueBuffer.like({ ct, fh.zeros({ 4096 }) }, { device = DEV, pin_memory = false })
h_buf = buf:copy_from({ ct, fh.ones({ 4096 }) }, { non_blocking = true })
host = fh.rand({ 262144 }, { pin_memory = cuda })
if cuda then
  dev_copy = host:to(DEV, { non_blocking = true })
  back = fh.empty({ 262144 }, { pin_memory = true })
  back:copy_(dev_copy, { non_blocking = true })
end
dropped = prog:replay({ ct }) -- and garbage for the collector at exit
dropped = nil
-- a finalizer that reports it ran: os.exit closes the state unless told not to
sentinel = newproxy(true)
getmetatable(sentinel).__gc = function() io.stdout:write("shutdown: finalized\n") io.stdout:flush() end
io.stdout:write("shutdown: ready\n")
io.stdout:flush()
if MODE == "exit0" then os.exit(0)
elseif MODE == "exit3" then os.exit(3)
elseif MODE == "exit_close" then os.exit(0, true)
elseif MODE == "exit_noclose" then os.exit(0, false)
elseif MODE == "error" then error("shutdown spec: the expected error")
end
]=]

-- what must never appear on stderr
local BAD = { "cuda%u%a+", "[Ll]eak", "[Ss]anitizer", "runtime error", "[Ss]egmentation", "[Aa]bort", "CudaError",
  "unusable", "double free", "corrupted" }

local CASES = {
  { mode = "normal", code = 0 },
  { mode = "exit0", code = 0 },
  { mode = "exit3", code = 3 },
  { mode = "exit_close", code = 0 },
  -- exits at once: no finalizer runs, and a sanitized build's LeakSanitizer
  -- would list what the Lua heap still owned (not a leak: nothing is freed by design)
  { mode = "exit_noclose", code = 0, unclosed = true, env = { ASAN_OPTIONS = "detect_leaks=0" } },
  { mode = "error", code = 1, err = "shutdown spec: the expected error" },
}

local script = cli.tempfile(SCRIPT, ".lua")

local function run_case(dev, c)
  local t0 = os.time()
  local r = cli.sh(("timeout 60 %s %s %s %s"):format(cli.quote(cli.bin), cli.quote(script), dev, c.mode),
    { env = c.env })
  local took = os.time() - t0
  local what = ("%s %s (exit %s, %d s)\nstdout:\n%s\nstderr:\n%s"):format(dev, c.mode, tostring(r.code), took,
    r.stdout, r.stderr)
  assert(r.code ~= 124, "timed out: " .. what)
  assert(r.stdout:find("shutdown: ready", 1, true), "did not reach the exit: " .. what)
  assert(r.code == c.code, ("expected exit status %d: %s"):format(c.code, what))
  local finalized = r.stdout:find("shutdown: finalized", 1, true) ~= nil
  assert(finalized == not c.unclosed,
    (c.unclosed and "a finalizer ran: " or "the Lua state was not closed (no finalizer ran): ") .. what)
  local rest = r.stderr
  if c.err then
    assert(rest:find("^fhelium: [^\n]*" .. c.err:gsub("%p", "%%%0")), "the expected error is missing: " .. what)
    -- the report: its line and the traceback, nothing else
    local lines = cli.lines(rest)
    local kept = {}
    for i, l in ipairs(lines) do
      if not (i == 1 or l == "stack traceback:" or l:find("^\t")) then kept[#kept + 1] = l end
    end
    rest = table.concat(kept, "\n")
    assert(rest == "", "unexpected text on stderr: " .. what)
  else
    assert(rest == "", "unexpected text on stderr: " .. what)
  end
  for _, p in ipairs(BAD) do
    assert(not r.stderr:find(p), ("stderr matches %q: %s"):format(p, what))
  end
end

describe("shutdown with pending work", function()
  teardown(function() os.remove(script) end)
  for _, c in ipairs(CASES) do
    it(("cpu: %s exits with status %d, promptly and quietly"):format(c.mode, c.code), function()
      run_case("cpu", c)
    end)
  end
  for _, c in ipairs(CASES) do
    H.gpu_it(("cuda:0: %s exits with status %d, promptly and quietly"):format(c.mode, c.code), function()
      run_case("cuda:0", c)
    end)
  end
end)
