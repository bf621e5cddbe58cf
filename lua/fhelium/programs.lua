-- Buffers, copy handles and programs for fhelium.execution (docs/api.md
-- "Execution: buffers and copy handles", "Execution: programs").
--
-- The objects are engine objects (engine/exec/buffer.c, program.c) behind the
-- binding (engine/binding/l_exec.c); replays run entirely in C. This file
-- holds the capture orchestration of ex.CudaGraphProgram.capture and
-- ex.HostGraphProgram.capture:
--
--   1. example_inputs (a list of fn's dynamic arguments) -> one retained
--      input buffer on their device (one CUDA device / the cpu);
--   2. warmup: `warmup` calls of fn on fresh buffers (never the retained one),
--      on the program's side stream; each output is validated, the stream
--      synchronized and the fresh buffer released. Lazy initialisation inside
--      fn happens here;
--   3. capture: thread-local stream capture on the side stream with every
--      allocation on the device going to the program's private pool (CUDA), or
--      a host tape (host); fn(unpack(inputs)) runs once; its output tree is
--      validated and kept;
--   fn runs through a C boundary in both stages (core.exec_call, and
--   prog:_capture_run, which also begins and ends the capture around it), so
--   a coroutine.yield inside fn raises instead of suspending a coroutine with
--   a capture active (which would record other coroutines' work into the
--   program, and keep the thread capturing if never resumed);
--   4. instantiate, one synchronized first replay, statistics.
-- A failure raises CudaGraphCaptureError with `stage` ("warmup", "capture",
-- "first replay"), the cause in the message and in `err.cause`, after closing
-- the program and collecting garbage: nothing stays allocated or capturing.
local core = require "fhelium.core"
local errors = require "fhelium.errors"

local M = {}

local function pack(...) return { n = select("#", ...), ... } end

local function callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return type(mt) == "table" and mt.__call ~= nil
end

local NOT_CAPTURABLE = "extra arguments and options tables passed to fn are not capturable: example_inputs "
  .. "holds only fn's dynamic tensor/value arguments; bind everything else with a closure (upvalues), a "
  .. "callable table (__call) or fh.partial(fn, ...)"

local function describe(cause)
  if errors.is_error(cause) then
    if cause.kind == "CudaGraphCaptureError" then return cause.message end
    return tostring(cause)
  end
  return tostring(cause)
end

-- Re-raise an error of the buffer layer under the program's name.
local function reraise(fname, err, hint)
  if not errors.is_error(err) then error(err, 0) end
  local msg = err.message:gsub("^ex%.ReusableValueBuffer%.like: ", "")
  if hint then msg = msg .. "; " .. hint end
  local e = errors.new(err.kind, fname .. ": " .. msg, { path = err.path, stage = err.stage })
  error(e, 0)
end

local capture_keys = { example_inputs = true, warmup = true }

-- The cause when fn called coroutine.yield during `stage` (the yield was
-- refused: fn runs through core.exec_call / _capture_run, a C boundary).
local function yield_refused(stage, raw)
  local where = tostring(raw):match("^(.-):?%s*attempt to yield across C%-call boundary$")
  where = where and where ~= "" and (" (at " .. where .. ")") or ""
  return errors.new("CudaGraphCaptureError", ("fn called coroutine.yield%s during the %s; a capture belongs to the "
    .. "function being captured and cannot be suspended (work done elsewhere meanwhile would be recorded into it): "
    .. "capture first and yield after capture returns (a coroutine that fn creates and resumes itself may yield to "
    .. "fn)"):format(where, stage), { stage = stage })
end

local function capture(kind, fn, opts)
  local cls = kind == "cuda" and "CudaGraphProgram" or "HostGraphProgram"
  local fname = "ex." .. cls .. ".capture"
  -- first: inside a captured function, name this function (not the buffer
  -- layer it would reach first)
  core.exec_refuse_in_capture(fname, "captures do not nest: capture the inner function on its own, before or after "
    .. "the outer capture")
  if not callable(fn) then
    errors.raise("TypeError", ("%s: argument 1 (fn) expected a function or a callable table, got %s"):format(fname,
      type(fn)), nil, 3)
  end
  if opts ~= nil and type(opts) ~= "table" then
    errors.raise("TypeError", ("%s: argument 2 (options) expected a table, got %s"):format(fname, type(opts)), nil, 3)
  end
  opts = opts or {}
  for k in pairs(opts) do
    if not capture_keys[k] then
      errors.raise("ValueError", ("%s: unknown option '%s' (expected example_inputs, warmup)"):format(fname,
        tostring(k)), nil, 3)
    end
  end
  local warmup = opts.warmup
  if warmup == nil then warmup = 3 end
  if type(warmup) ~= "number" or warmup ~= math.floor(warmup) or warmup < 0 or warmup > 1e6 then
    errors.raise("ValueError", ("%s: warmup must be an integer >= 0, got %s"):format(fname, tostring(warmup)), nil, 3)
  end
  local inputs = opts.example_inputs
  if inputs == nil then
    errors.raise("ValueError", ("%s: example_inputs is required (the list of fn's dynamic arguments)"):format(fname),
      nil, 3)
  end
  -- the argument list: a list (or tuple) of trees
  local ok, sig = pcall(core.tree_signature, inputs)
  if not ok then
    if errors.is(sig, "TypeError") then
      local msg = sig.message:gsub("^ex%.ValueTreeSignature%.from_value: ", ""):gsub("^value", "example_inputs")
      reraise(fname, errors.new("TypeError", msg, { path = sig.path and
        sig.path:gsub("^value", "example_inputs") }), NOT_CAPTURABLE)
    end
    reraise(fname, errors.new(sig.kind, (sig.message:gsub("^ex%.ValueTreeSignature%.from_value: ", "")),
      { path = sig.path, stage = sig.stage }))
  end
  if sig.kind ~= "list" and sig.kind ~= "tuple" then
    errors.raise("TypeError", ("%s: example_inputs must be a list of fn's arguments (tensors, values or trees of "
      .. "them), got a %s; %s"):format(fname, sig.kind, NOT_CAPTURABLE), nil, 3)
  end
  local nargs = #sig.children

  -- 1. the retained input buffer
  local bok, buf = pcall(core.buffer_like, inputs, nil, "example_inputs")
  if not bok then reraise(fname, buf) end
  local dev = buf.device
  if (kind == "cuda") ~= (dev ~= "cpu") then
    buf:close()
    errors.raise("ValueError", ("%s: example_inputs must be on %s, got %s"):format(fname,
      kind == "cuda" and "one CUDA device" or "the cpu (use CudaGraphProgram for CUDA inputs)", dev), nil, 3)
  end
  local pok, prog = pcall(core.program_new, kind, buf)
  if not pok then
    buf:close()
    reraise(fname, prog)
  end
  buf = nil -- the program holds the engine buffer

  local function fail(stage, cause)
    pcall(prog.close, prog)
    prog = nil
    collectgarbage()
    collectgarbage()
    local e = errors.new("CudaGraphCaptureError", ("%s: %s failed: %s"):format(fname, stage, describe(cause)),
      { stage = stage, path = errors.is_error(cause) and cause.path or nil })
    e.cause = cause
    error(e, 0)
  end

  local side = prog.side_stream
  local cuda = kind == "cuda" and require("fhelium.cuda") or nil
  local clock = core.exec_clock
  local timing = { warmup_iterations = warmup }

  -- 2. warmup on fresh buffers
  local t0 = clock()
  for i = 1, warmup do
    local fok, fresh = pcall(core.buffer_like, inputs, { device = dev }, "example_inputs")
    if not fok then fail("warmup", fresh) end
    local vok, args = pcall(function() return fresh.value end)
    if not vok then fail("warmup", args) end
    -- unyieldable (core.exec_call): fn runs to completion inside this call
    local res
    if cuda then
      res = pack(core.exec_call(cuda.with_stream, side, function() return fn(unpack(args, 1, nargs)) end))
    else
      res = pack(core.exec_call(fn, unpack(args, 1, nargs)))
    end
    local rok, rerr = res[1], res[2]
    if not rok and res[3] then rerr = yield_refused("warmup", rerr) end
    if rok and res.n > 2 then
      rok, rerr = false, ("fn returned %d values; return one output tree (a list or ex.tuple of them)"):format(res.n - 1)
    end
    if rok then rok, rerr = pcall(prog._check_output, prog, res[2], "output") end
    res, args = nil, nil
    local sok, serr = pcall(function()
      if side then side:synchronize() end
      fresh:close()
    end)
    fresh = nil
    if not rok then fail("warmup", rerr) end
    if not sok then fail("warmup", serr) end
  end
  timing.warmup_seconds = clock() - t0

  -- 3. capture on the retained inputs
  local args = prog:_input_value()
  local t1 = clock()
  -- begin, fn (unyieldable), end: one C call, so the capture is active only
  -- while fn runs and always ends with it
  local res = pack(pcall(prog._capture_run, prog, fn, unpack(args, 1, nargs)))
  if not res[1] then fail("capture", res[2]) end -- beginning or ending failed
  if not res[2] then fail("capture", res[4] and yield_refused("capture", res[3]) or res[3]) end
  if res.n > 3 then
    fail("capture", ("fn returned %d values; return one output tree (a list or ex.tuple of them)"):format(res.n - 2))
  end
  local sok, serr = pcall(prog._set_output, prog, res[3])
  if not sok then fail("capture", serr) end
  res, args = nil, nil
  local iok, ierr = pcall(prog._instantiate, prog)
  if not iok then fail("capture", ierr) end
  timing.capture_seconds = clock() - t1

  -- 4. the first replay, synchronized
  local t2 = clock()
  local lok, lerr = pcall(prog._launch, prog, true)
  if not lok then fail("first replay", lerr) end
  timing.first_replay_seconds = clock() - t2
  prog:_set_timing(timing)
  return prog
end

--- Install the public names into the fhelium.execution table.
function M.install(ex)
  ex.ReusableValueBuffer = {
    --- ReusableValueBuffer.like(example, {device=, pin_memory=}): an
    --- independent tree shaped exactly like `example` on the target device,
    --- at addresses that never change, initialised with a copy of it.
    like = function(example, opts) return core.buffer_like(example, opts, "example") end,
    metatable = core.ReusableValueBuffer_metatable,
  }
  ex.CopyHandle = { metatable = core.CopyHandle_metatable }
  --- ex.pin_value_tree(tree): a clone of the tree in pinned CPU memory.
  ex.pin_value_tree = core.pin_value_tree
  --- ex.value_tree_nbytes(tree): the bytes of the tree's tensors.
  ex.value_tree_nbytes = core.value_tree_nbytes
  ex.CudaGraphProgram = {
    --- CudaGraphProgram.capture(fn, {example_inputs = {...}, warmup = 3})
    capture = function(fn, opts) return capture("cuda", fn, opts) end,
    metatable = core.Program_metatable,
  }
  ex.HostGraphProgram = {
    --- HostGraphProgram.capture(fn, {example_inputs = {...}, warmup = 3}):
    --- the same program for cpu inputs, captured into a host tape.
    capture = function(fn, opts) return capture("host", fn, opts) end,
    metatable = core.Program_metatable,
  }
  ex.partial = require "fhelium.partial"
  --- Test aid (not API): the next n program launches on this thread fail
  --- with an ExecutionError before launching (to reach the "first replay"
  --- failure path in specs).
  ex._fail_next_launches = core._exec_fail_next_launches
end

return M
