-- Shared spec helpers. `local H = require "spec.helpers"`.
local fh = require "fhelium"
local H = {}

H.has_gpu = fh.cuda.is_available()
if os.getenv("FHELIUM_REQUIRE_GPU") == "1" and not H.has_gpu then
  error("scripts/test --gpu: no usable CUDA device (" .. fh.cuda.unavailable_reason() .. ")", 0)
end

--- skip_it(name, reason): a spec that does not run here, reported as
--- skipped (a busted pending) with `reason`, at the line of the spec file
--- that called skip_it. The location comes from busted, which records the
--- line that called `pending`: skip_it tail-calls it, so that line is the
--- caller's, and a local wrapper in a spec file must tail-call skip_it
--- (`return H.skip_it(name, why)`) for its own caller's line to be named.
--- The summary (spec/support/summary_output.lua) groups skips by reason:
--- the text after "(skipped: " in the name.
function H.skip_it(name, reason)
  return getfenv(2).pending(name .. " (skipped: " .. reason .. ")")
end

--- gpu_it(name, fn): an `it` tagged #gpu that runs only with a CUDA device;
--- elsewhere it is skipped (H.skip_it) with the reason.
function H.gpu_it(name, fn)
  local env = getfenv(2)
  if H.has_gpu then
    return env.it(name .. " #gpu", fn)
  end
  return H.skip_it(name .. " #gpu", "needs a CUDA device: " .. fh.cuda.unavailable_reason())
end

--- gpu_window_it(name, fn): a gpu_it whose assertions rely on a kernel
--- (fh.cuda._spin) still running when the host checks (a race window opened
--- on purpose). compute-sanitizer serialises launches, so under
--- scripts/gpu-check (FHELIUM_SANITIZER set) it is skipped with that reason.
function H.gpu_window_it(name, fn)
  local env = getfenv(2)
  local tool = os.getenv("FHELIUM_SANITIZER")
  if H.has_gpu and tool and tool ~= "" then
    env.pending(name .. " #gpu (skipped under compute-sanitizer " .. tool
      .. ": it relies on a kernel still running when the host checks, and the sanitizer serialises launches)")
  elseif H.has_gpu then
    env.it(name .. " #gpu", fn)
  else
    env.pending(name .. " #gpu (skipped: no CUDA device: " .. fh.cuda.unavailable_reason() .. ")")
  end
end

--- Calls fn(...) expecting an fhelium error of `kind` whose message matches
--- every Lua pattern in `patterns` (a string or a list). Returns the error.
function H.expect_error(kind, patterns, fn, ...)
  local ok, err = pcall(fn, ...)
  assert(not ok, "expected a " .. kind .. " but the call succeeded")
  assert(fh.errors.is_error(err), "expected an fhelium error object, got " .. tostring(err))
  assert(fh.errors.is(err, kind), ("expected %s, got %s"):format(kind, tostring(err)))
  if type(patterns) == "string" then patterns = { patterns } end
  for _, p in ipairs(patterns or {}) do
    assert(err.message:find(p), ("message %q does not match %q"):format(err.message, p))
  end
  return err
end

--- A seed for randomized specs, printed so a failure can be replayed
--- (FHELIUM_SEED overrides).
function H.seed(label)
  local s = tonumber(os.getenv("FHELIUM_SEED")) or (os.time() + math.floor(os.clock() * 1e6)) % 2147483647
  io.stderr:write(("[seed %s: %d]\n"):format(label or "", s))
  return s
end

--- Element-wise Lua reference over two equal-shape nested lists.
function H.map2(a, b, f)
  if type(a) ~= "table" or (a[1] ~= nil and type(a[1]) ~= "table" and #a == 2 and false) then return f(a, b) end
  local r = {}
  for i = 1, #a do r[i] = H.map2(a[i], b[i], f) end
  return r
end

return H
