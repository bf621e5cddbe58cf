-- CudaGraphProgram and HostGraphProgram (docs/api.md "Execution: programs"):
-- warmup, capture, first replay, replays equal to eager evaluation,
-- borrowed/owned outputs, input validation, the latest-CopyHandle rule,
-- close, capture errors at every stage, GC storms, independence. Every rule
-- without streams runs on HostGraphProgram in CI; the stream rules run on
-- CudaGraphProgram (#gpu).
local fh = require "fhelium"
local ex = require "fhelium.execution"
local H = require "spec.helpers"
local T = require "spec.fixtures.small_context"

local ctx = T.context()
local N = ctx.ring_degree

local function f64(t, dev) return fh.tensor(t, { dtype = "float64", device = dev }) end
local function seq(n, start, dev)
  local t = fh.arange(start or 0, (start or 0) + n, 1, { dtype = "float64" })
  return dev and t:to(dev) or t
end

-- The function under test: several ops, an in-place op on a temporary, a
-- dict output with a list inside.
local function step(x, w)
  local y = x * w + 1
  y:mul_(2)
  local z = y - w / 4
  return { y = y, z = { z, -x } }
end

local function eager(x, w)
  local r = step(x, w)
  return { r.y:tolist(), r.z[1]:tolist(), r.z[2]:tolist() }
end

local function got(out) return { out.y:tolist(), out.z[1]:tolist(), out.z[2]:tolist() } end

local function check_eager_op(dev)
  -- nothing is capturing: an eager op runs and can be read
  assert.same({ 3, 5 }, (f64({ 1, 2 }, dev) * 2 + 1):tolist())
end

-- Run the whole suite for one program class on one device.
local function suite(Program, dev, it_)
  local is_cuda = dev ~= "cpu"
  local function sync() if is_cuda then fh.cuda.synchronize() end end
  local function capture(fn, inputs, opts)
    opts = opts or {}
    opts.example_inputs = inputs
    return Program.capture(fn, opts)
  end

  it_("warms up on fresh buffers, captures without executing, and replays once, synchronized", function()
    local calls, ptrs, launches = 0, {}, {}
    local fn = function(x, w)
      calls = calls + 1
      ptrs[calls] = x:data_ptr()
      local before = fh.info().launches
      x:add_(1) -- mutates the input buffer of this call
      local r = x * w
      launches[calls] = fh.info().launches - before
      return r
    end
    local x, w = seq(8, 0, dev), seq(8, 10, dev)
    local prog = capture(fn, { x, w }, { warmup = 3 })
    assert.equal(4, calls) -- 3 warmup calls, 1 capture
    for i = 1, 3 do
      assert.are_not.equal(ptrs[4], ptrs[i], "warmup used the retained input buffer")
    end
    if not is_cuda then
      assert.equal(2, launches[1]) -- warmup runs eagerly
      assert.equal(0, launches[4]) -- the capture records, nothing executes
    end
    -- the retained buffer saw exactly one x:add_(1): the first replay's
    local expect = {}
    for i = 1, 8 do expect[i] = (i - 1 + 1) * (10 + i - 1) end
    assert.same(expect, prog.output:tolist())
    local s = prog.stats
    assert.equal(3, s.warmup_iterations)
    assert.equal(1, s.replays)
    assert.is_true(s.warmup_seconds >= 0 and s.capture_seconds >= 0 and s.first_replay_seconds >= 0)
    assert.is_true(s.node_count >= 2)
    assert.is_true(s.memory_allocated_bytes >= 3 * 64)
    assert.is_true(s.memory_reserved_bytes > 0)
    assert.equal(dev == "cpu" and "cpu" or "cuda:0", prog.device)
    assert.equal(128, prog.input_nbytes)
    assert.is_true(prog.input_signature == ex.ValueTreeSignature.from_value({ x, w }))
    -- the examples themselves were never touched
    assert.same(seq(8):tolist(), x:tolist())
    local p0 = capture(fn, { x, w }, { warmup = 0 })
    assert.equal(5, calls)
    assert.equal(0, p0.stats.warmup_iterations)
    prog:close()
    p0:close()
  end)

  it_("replays with changing inputs, equal to eager evaluation every time", function()
    local prog = capture(step, { seq(16, 0, dev), seq(16, 1, dev) })
    assert.same(eager(seq(16, 0, dev), seq(16, 1, dev)), got(prog.output))
    local seed = H.seed("program replays")
    local g = fh.Generator(seed)
    for _ = 1, 20 do
      local x = fh.randn({ 16 }, { dtype = "float64", generator = g, device = dev })
      local w = fh.randn({ 16 }, { dtype = "float64", generator = g, device = dev })
      local out = prog:replay({ x, w })
      sync()
      assert.same(eager(x, w), got(out))
    end
    assert.equal(21, prog.stats.replays)
    prog:close()
  end)

  it_("returns the same borrowed output every replay, overwritten by the next; copy_output is owned", function()
    local prog = capture(step, { seq(4, 0, dev), seq(4, 0, dev) })
    local ptr = prog.output.y:data_ptr()
    local o1 = prog:replay({ seq(4, 1, dev), seq(4, 2, dev) })
    local owned = prog:replay({ seq(4, 1, dev), seq(4, 2, dev) }, { copy_output = true })
    local o2 = prog:replay({ seq(4, 5, dev), seq(4, 6, dev) }, { synchronize = true })
    assert.equal(o1, o2)
    assert.equal(prog.output, o2)
    assert.equal(ptr, o2.y:data_ptr())
    assert.same(eager(seq(4, 5, dev), seq(4, 6, dev)), got(o1)) -- o1 was overwritten
    assert.same(eager(seq(4, 1, dev), seq(4, 2, dev)), got(owned)) -- owned was not
    assert.are_not.equal(owned, o2)
    assert.are_not.equal(ptr, owned.y:data_ptr())
    assert.equal(dev == "cpu" and "cpu" or "cuda:0", owned.y.device)
    prog:close()
  end)

  it_("rejects every input mismatch with CudaGraphInputError and copies nothing", function()
    local ct = fh.Ciphertext { data = fh.zeros({ 2, 3, N }, { dtype = "uint64" }), context = ctx }
    if is_cuda then ct = ct:to(dev) end
    local fn = function(x, v) return { x + 1, v.data } end
    local prog = capture(fn, { seq(4, 0, dev), ct })
    local good = { seq(4, 10, dev), ct }
    prog:replay(good)
    local function untouched()
      local out = prog:replay_prepared()
      sync()
      assert.same({ 11, 12, 13, 14 }, out[1]:tolist())
    end
    local ct1 = fh.Ciphertext { data = fh.zeros({ 2, 2, N }, { dtype = "uint64" }), context = ctx, level = 1 }
    local cases = {
      { "shape mismatch", { seq(5, 0, dev), ct }, "^%a+GraphProgram:replay: inputs%[1%]" },
      { "dtype mismatch", { fh.zeros({ 4 }, { dtype = "float32", device = dev }), ct }, "^%a+GraphProgram:replay: inputs%[1%]" },
      { "stride mismatch", { seq(8, 0, dev):view({ 4, 2 }):select(2, 1), ct }, "^%a+GraphProgram:replay: inputs%[1%]" },
      { "requires_grad mismatch", { seq(4, 0, dev):requires_grad_(true), ct }, "^%a+GraphProgram:replay: inputs%[1%]" },
      { "length mismatch", { seq(4, 0, dev) }, "^%a+GraphProgram:replay: inputs: " },
      { "kind mismatch", { seq(4, 0, dev), seq(4, 0, dev) }, "^%a+GraphProgram:replay: inputs%[2%]" },
      { "kind mismatch", ex.tuple(seq(4, 0, dev), ct), "^%a+GraphProgram:replay: inputs: " },
      { "level mismatch", { seq(4, 0, dev), is_cuda and ct1:to(dev) or ct1 }, "^%a+GraphProgram:replay: inputs%[2%]" },
    }
    for _, c in ipairs(cases) do
      local err = H.expect_error("CudaGraphInputError", { c[1], c[3] }, prog.replay, prog, c[2])
      assert.is_true(fh.errors.is(err, "ExecutionInputError"))
      H.expect_error("CudaGraphInputError", c[1], prog.copy_inputs_from, prog, c[2])
      untouched()
    end
    H.expect_error("TypeError", "unsupported leaf", prog.replay, prog, { seq(4, 0, dev), 7 })
    H.expect_error("TypeError", "argument 1 %(inputs%) is missing", prog.replay, prog)
    H.expect_error("ValueError", "unknown option 'copy'", prog.replay, prog, good, { copy = true })
    untouched()
    prog:close()
  end)

  it_("follows the latest-CopyHandle rule on the prepared path", function()
    local prog = capture(step, { seq(4, 0, dev), seq(4, 0, dev) })
    local other = capture(step, { seq(4, 0, dev), seq(4, 0, dev) })
    local h1 = prog:copy_inputs_from({ seq(4, 1, dev), seq(4, 2, dev) })
    local h2 = prog:copy_inputs_from({ seq(4, 3, dev), seq(4, 4, dev) })
    H.expect_error("CudaGraphInputError", { "stale", "latest CopyHandle" }, prog.replay_prepared, prog,
      { copy_handle = h1 })
    H.expect_error("CudaGraphInputError", { "not been replayed", "latest CopyHandle" }, prog.replay_prepared, prog)
    local foreign = other:copy_inputs_from({ seq(4, 3, dev), seq(4, 4, dev) })
    H.expect_error("CudaGraphInputError", { "foreign", "latest CopyHandle" }, prog.replay_prepared, prog,
      { copy_handle = foreign })
    local plain = ex.ReusableValueBuffer.like({ seq(4, 0, dev), seq(4, 0, dev) })
    H.expect_error("CudaGraphInputError", { "foreign", "latest CopyHandle" }, prog.replay_prepared, prog,
      { copy_handle = plain:copy_from({ seq(4, 0, dev), seq(4, 0, dev) }) })
    H.expect_error("TypeError", "copy_handle' expected a CopyHandle", prog.replay_prepared, prog, { copy_handle = 1 })
    H.expect_error("TypeError", "option 'stream' expected a Stream, got number", prog.replay_prepared, prog,
      { copy_handle = h2, stream = 1 })
    local out = prog:replay_prepared({ copy_handle = h2, synchronize = true })
    assert.same(eager(seq(4, 3, dev), seq(4, 4, dev)), got(out))
    -- a replayed handle is stale; without a handle the current inputs replay
    H.expect_error("CudaGraphInputError", { "stale", "latest CopyHandle" }, prog.replay_prepared, prog,
      { copy_handle = h2 })
    out = prog:replay_prepared({ synchronize = true })
    assert.same(eager(seq(4, 3, dev), seq(4, 4, dev)), got(out))
    -- replay() supersedes an outstanding handle
    local h3 = prog:copy_inputs_from({ seq(4, 7, dev), seq(4, 8, dev) })
    prog:replay({ seq(4, 5, dev), seq(4, 6, dev) })
    H.expect_error("CudaGraphInputError", { "stale", "latest CopyHandle" }, prog.replay_prepared, prog,
      { copy_handle = h3 })
    out = prog:replay_prepared({ synchronize = true })
    assert.same(eager(seq(4, 5, dev), seq(4, 6, dev)), got(out))
    -- copy_output on the prepared path
    local h4 = prog:copy_inputs_from({ seq(4, 9, dev), seq(4, 1, dev) })
    local owned = prog:replay_prepared({ copy_handle = h4, copy_output = true })
    prog:replay({ seq(4, 0, dev), seq(4, 0, dev) }, { synchronize = true })
    assert.same(eager(seq(4, 9, dev), seq(4, 1, dev)), got(owned))
    prog:close()
    other:close()
  end)

  it_("_read_back: an owned host copy of the output (pinned for CUDA), like tree_copy_to of prog.output", function()
    local prog = capture(step, { seq(4, 0, dev), seq(4, 0, dev) })
    local s = is_cuda and fh.cuda.Stream() or nil
    local h = prog:copy_inputs_from({ seq(4, 3, dev), seq(4, 4, dev) })
    prog:replay_prepared({ copy_handle = h, stream = s })
    local back = prog:_read_back(s)
    if s then s:synchronize() end
    assert.same(eager(seq(4, 3, dev), seq(4, 4, dev)), got(back))
    assert.equal("cpu", back.y.device)
    assert.equal(is_cuda, back.y:is_pinned())
    local want = fh.core.tree_copy_to(prog.output, { device = "cpu" })
    assert.same(got(want), got(back))
    -- owned: the next replay does not change it
    prog:replay({ seq(4, 0, dev), seq(4, 0, dev) }, { synchronize = true })
    assert.same(eager(seq(4, 3, dev), seq(4, 4, dev)), got(back))
    H.expect_error("TypeError", "stream", prog._read_back, prog, 5)
    prog:close()
    H.expect_error("ExecutionError", "closed", prog._read_back, prog)
  end)

  it_("_push: a pipeline's copy in, replay and read-back in one call (CUDA programs only)", function()
    local prog = capture(step, { seq(4, 0, dev), seq(4, 0, dev) })
    if not is_cuda then
      H.expect_error("TypeError", { "HostGraphProgram:_push", "expected a CudaGraphProgram" }, prog._push, prog,
        { seq(4, 1), seq(4, 2) })
      prog:close()
      return
    end
    local cin, cs, cout = fh.cuda.Stream(), fh.cuda.Stream(), fh.cuda.Stream()
    local out, ev = prog:_push({ seq(4, 3):pin_memory(), seq(4, 4):pin_memory() }, cin, nil, cs, cout)
    ev:synchronize()
    assert.same(eager(seq(4, 3), seq(4, 4)), got(out))
    assert.equal("cpu", out.y.device)
    assert.is_true(out.y:is_pinned())
    local out2, ev2 = prog:_push({ seq(4, 5), seq(4, 6) }, cin, ev, cs, cout) -- pageable sources are staged
    ev2:synchronize()
    assert.same(eager(seq(4, 5), seq(4, 6)), got(out2))
    assert.same(eager(seq(4, 3), seq(4, 4)), got(out)) -- owned
    H.expect_error("TypeError", { "_push", "inputs" }, prog._push, prog)
    H.expect_error("TypeError", { "_push", "copy_in" }, prog._push, prog, { seq(4, 1), seq(4, 1) }, 5, nil, cs, cout)
    H.expect_error("TypeError", { "_push", "wait" }, prog._push, prog, { seq(4, 1), seq(4, 1) }, cin, 5, cs, cout)
    H.expect_error("TypeError", { "_push", "compute" }, prog._push, prog, { seq(4, 1), seq(4, 1) }, cin, nil, nil, cout)
    H.expect_error("TypeError", { "_push", "copy_out" }, prog._push, prog, { seq(4, 1), seq(4, 1) }, cin, nil, cs)
    local replays = prog.stats.replays
    H.expect_error("CudaGraphInputError", { "GraphProgram:_push: inputs%[1%]", "shape mismatch" }, prog._push, prog,
      { seq(5, 1), seq(4, 1) }, cin, nil, cs, cout)
    assert.equal(replays, prog.stats.replays) -- nothing ran
    prog:close()
    H.expect_error("ExecutionError", "closed", prog._push, prog, { seq(4, 1), seq(4, 1) }, cin, nil, cs, cout)
  end)

  it_("closes idempotently; every later use is an ExecutionError", function()
    local prog = capture(step, { seq(4, 0, dev), seq(4, 0, dev) })
    local h = prog:copy_inputs_from({ seq(4, 1, dev), seq(4, 1, dev) })
    local out = prog.output
    prog:close()
    assert.is_true(prog:is_closed())
    prog:close()
    local cls = is_cuda and "CudaGraphProgram" or "HostGraphProgram"
    H.expect_error("ExecutionError", cls .. ":replay: the program is closed", prog.replay, prog,
      { seq(4, 0, dev), seq(4, 0, dev) })
    H.expect_error("ExecutionError", "closed", prog.copy_inputs_from, prog, { seq(4, 0, dev), seq(4, 0, dev) })
    H.expect_error("ExecutionError", "closed", prog.replay_prepared, prog, { copy_handle = h })
    H.expect_error("ExecutionError", cls .. ".output: the program is closed", function() return prog.output end)
    H.expect_error("ExecutionError", "closed", function() return prog.stats end)
    H.expect_error("ExecutionError", "closed", function() return prog.input_signature end)
    assert.equal(cls .. "(closed)", tostring(prog))
    -- an output kept by the caller stays readable
    collectgarbage()
    assert.equal(4, #out.y:tolist())
  end)

  it_("reports a failing warmup call as CudaGraphCaptureError stage 'warmup' with the cause", function()
    local calls = 0
    local fn = function(x)
      calls = calls + 1
      if calls == 2 then error("boom in call 2") end
      return x + 1
    end
    local err = H.expect_error("CudaGraphCaptureError", { "warmup failed", "boom in call 2" }, Program.capture, fn,
      { example_inputs = { seq(4, 0, dev) } })
    assert.equal("warmup", err.stage)
    assert.matches("boom in call 2", tostring(err.cause))
    check_eager_op(dev)
    -- output validation in warmup: not a tree
    err = H.expect_error("CudaGraphCaptureError", { "warmup failed", "TypeError", "unsupported leaf: a number" },
      Program.capture, function(x) return 3 end, { example_inputs = { seq(4, 0, dev) } })
    assert.equal("warmup", err.stage)
    assert.equal("TypeError", err.cause.kind)
    err = H.expect_error("CudaGraphCaptureError", { "fn returned 2 values" }, Program.capture,
      function(x) return x, x end, { example_inputs = { seq(4, 0, dev) } })
    assert.equal("warmup", err.stage)
  end)

  it_("reports failures during capture as stage 'capture', leaving nothing capturing", function()
    local calls = 0
    local fn = function(x)
      calls = calls + 1
      if calls == 3 then error(fh.errors.new("StateError", "level too high")) end
      return x * 2
    end
    local err = H.expect_error("CudaGraphCaptureError", { "capture failed", "StateError: level too high" },
      Program.capture, fn, { example_inputs = { seq(4, 0, dev) }, warmup = 2 })
    assert.equal("capture", err.stage)
    assert.equal("StateError", err.cause.kind)
    check_eager_op(dev)
    -- a host read of device data inside the captured function
    err = H.expect_error("CudaGraphCaptureError", { "capture failed", "not possible during capture" },
      Program.capture, function(x) local _ = (x + 1):tolist(); return x end,
      { example_inputs = { seq(4, 0, dev) }, warmup = 0 })
    assert.equal("capture", err.stage)
    check_eager_op(dev)
    -- output validation at capture
    err = H.expect_error("CudaGraphCaptureError", { "capture failed", 'output%["k"%]', "unsupported leaf" },
      Program.capture, function(x) return { k = true } end, { example_inputs = { seq(4, 0, dev) }, warmup = 0 })
    assert.equal("capture", err.stage)
    -- buffers and programs refuse to run inside a captured function, each
    -- naming the function the user called, once
    local cls = is_cuda and "CudaGraphProgram" or "HostGraphProgram"
    local buf = ex.ReusableValueBuffer.like({ seq(4, 0, dev) })
    local other = capture(function(y) return y + 1 end, { seq(4, 0, dev) })
    local inside = {
      { "ReusableValueBuffer:copy_from", function(x) buf:copy_from({ x }) end },
      { "ex.ReusableValueBuffer.like", function(x) ex.ReusableValueBuffer.like({ x }) end },
      { cls .. ":replay", function(x) other:replay({ x }) end },
      { cls .. ":replay_prepared", function() other:replay_prepared() end },
      { cls .. ":copy_inputs_from", function(x) other:copy_inputs_from({ x }) end },
      -- captures do not nest: the inner call names itself, not the buffer layer
      { "ex." .. cls .. ".capture", function(x) Program.capture(function(y) return y end, { example_inputs = { x } }) end,
        "captures do not nest" },
    }
    for _, c in ipairs(inside) do
      local name = c[1]:gsub("[%.%:]", "%%%0")
      err = H.expect_error("CudaGraphCaptureError", { "^ex%." .. cls .. "%.capture: capture failed: " .. name
        .. " cannot run inside a function being captured %(", c[3] }, Program.capture,
        function(x) c[2](x); return x end, { example_inputs = { seq(4, 0, dev) }, warmup = 0 })
      assert.equal("capture", err.stage)
      assert.equal("CudaGraphCaptureError", err.cause.kind)
      assert.matches("^" .. name .. " cannot run inside", err.cause.message)
      assert.is_nil(err.message:find(c[1] .. ": " .. c[1], 1, true), "named twice: " .. err.message)
      if c[1] ~= "ex.ReusableValueBuffer.like" then assert.is_nil(err.message:find("ReusableValueBuffer.like", 1, true)) end
      check_eager_op(dev)
    end
    -- the refused calls changed nothing: the other program and the buffer still work
    assert.same({ 6, 7, 8, 9 }, other:replay({ seq(4, 5, dev) }, { synchronize = true }):tolist())
    other:close()
    buf:close()
    -- the program works after all of that
    local prog = capture(step, { seq(4, 0, dev), seq(4, 1, dev) })
    assert.same(eager(seq(4, 0, dev), seq(4, 1, dev)), got(prog.output))
    prog:close()
  end)

  it_("refuses a coroutine.yield inside fn at warmup and at capture, tearing the capture down", function()
    for _, c in ipairs { { 0, "capture" }, { 2, "warmup" } } do
      local warmup, stage = c[1], c[2]
      local calls = 0
      local co = coroutine.create(function()
        return Program.capture(function(x)
          calls = calls + 1
          local y = x * 2
          coroutine.yield("suspended inside fn")
          return y + 1
        end, { example_inputs = { seq(4, 0, dev) }, warmup = warmup })
      end)
      -- the yield never suspends the coroutine: capture raises inside it
      local ok, err = coroutine.resume(co)
      assert.is_false(ok, "fn yielded out of " .. stage)
      assert.equal("dead", coroutine.status(co))
      assert.is_true(fh.errors.is(err, "CudaGraphCaptureError"), tostring(err))
      assert.equal(stage, err.stage)
      local cls = is_cuda and "CudaGraphProgram" or "HostGraphProgram"
      for _, pat in ipairs { "^ex%." .. cls .. "%.capture: " .. stage .. " failed: ", "coroutine%.yield",
        "spec/program_spec%.lua:%d+", "during the " .. stage, "cannot be suspended" } do
        assert.matches(pat, err.message)
      end
      assert.equal(1, calls)
      -- nothing is capturing: the main coroutine's work runs and is read
      check_eager_op(dev)
      co = nil
      collectgarbage()
      collectgarbage()
      check_eager_op(dev)
    end
  end)

  it_("records only fn's own work when captured inside a coroutine; coroutines fn resumes may yield to fn", function()
    local x0 = seq(4, 0, dev)
    local outside = 0
    local co = coroutine.create(function()
      coroutine.yield("before")
      local prog = Program.capture(function(x)
        -- a generator created and driven by fn: its yields return to fn
        local gen = coroutine.wrap(function()
          coroutine.yield(x * 2)
          coroutine.yield(x + 3)
        end)
        -- a yield that fn itself catches never suspends anything
        local yok = pcall(coroutine.yield, "swallowed")
        assert(not yok)
        return gen() + gen()
      end, { example_inputs = { x0 } })
      coroutine.yield(prog)
      return prog
    end)
    assert.same({ true, "before" }, { coroutine.resume(co) })
    -- main-coroutine work between the coroutine's steps
    for i = 1, 3 do
      local _ = (seq(4, i, dev) + 1):tolist()
      outside = outside + 1
    end
    local ok, prog = coroutine.resume(co)
    assert.is_true(ok, tostring(prog))
    assert.is_true(getmetatable(prog) == Program.metatable, "capture returned " .. tostring(prog))
    for i = 1, 3 do local _ = (seq(4, i, dev) * 5):tolist() end
    if not is_cuda then assert.equal(3, prog.stats.node_count) end -- x*2, x+3, their sum
    local out = prog:replay({ seq(4, 10, dev) }, { synchronize = true })
    assert.same({ 33, 36, 39, 42 }, out:tolist()) -- 3x + 3
    assert.is_true(coroutine.resume(co))
    assert.equal("dead", coroutine.status(co))
    prog:close()
  end)

  it_("reports a failing first replay as stage 'first replay'", function()
    ex._fail_next_launches(1)
    local err = H.expect_error("CudaGraphCaptureError", { "first replay failed", "failure injected" },
      Program.capture, step, { example_inputs = { seq(4, 0, dev), seq(4, 1, dev) }, warmup = 1 })
    assert.equal("first replay", err.stage)
    assert.equal("ExecutionError", err.cause.kind)
    check_eager_op(dev)
  end)

  it_("validates capture options", function()
    local x = seq(4, 0, dev)
    H.expect_error("ValueError", "warmup must be an integer >= 0, got %-1", Program.capture, step,
      { example_inputs = { x, x }, warmup = -1 })
    H.expect_error("ValueError", "warmup must be an integer >= 0, got 1.5", Program.capture, step,
      { example_inputs = { x, x }, warmup = 1.5 })
    H.expect_error("ValueError", "example_inputs is required", Program.capture, step, {})
    H.expect_error("ValueError", "unknown option 'inputs'", Program.capture, step, { inputs = { x } })
    H.expect_error("TypeError", "argument 1 %(fn%) expected a function or a callable table", Program.capture, 3,
      { example_inputs = { x } })
    H.expect_error("TypeError", { "example_inputs%[2%]", "not capturable", "fh.partial" }, Program.capture, step,
      { example_inputs = { x, 2 } })
    H.expect_error("TypeError", { 'example_inputs%[2%]%["scale"%]', "not capturable" }, Program.capture, step,
      { example_inputs = { x, { scale = 2 } } })
    H.expect_error("TypeError", { "must be a list of fn's arguments", "not capturable" }, Program.capture, step,
      { example_inputs = x })
    H.expect_error("ValueError", "no tensor leaves", Program.capture, function() end, { example_inputs = {} })
    H.expect_error("ValueError", "share one storage", Program.capture, step, { example_inputs = { x, x } })
    local prog = Program.capture(step, { example_inputs = { x, seq(4, 1, dev) }, warmup = 0 })
    H.expect_error("TypeError", "programs are read%-only %(cannot set field 'output'%)", function() prog.output = 5 end)
    H.expect_error("TypeError", "replay_prepared: option 'copy_handle' expected a CopyHandle, got number",
      prog.replay_prepared, prog, { copy_handle = 5 })
    prog:close()
  end)

  it_("takes static state from upvalues, callable tables and fh.partial", function()
    local w = seq(4, 5, dev)
    local by_partial = capture(fh.partial(step, seq(4, 1, dev)), { seq(4, 2, dev) })
    assert.same(eager(seq(4, 1, dev), seq(4, 2, dev)), got(by_partial.output))
    local callable = setmetatable({ w = w }, { __call = function(self, x) return step(x, self.w) end })
    local by_table = capture(callable, { seq(4, 3, dev) })
    local out = by_table:replay({ seq(4, 9, dev) }, { synchronize = true })
    assert.same(eager(seq(4, 9, dev), w), got(out))
    -- the program keeps the static tensors it captured alive
    local p = capture(function(x) return x + w end, { seq(4, 0, dev) })
    w = nil
    callable, by_table = nil, nil
    collectgarbage()
    collectgarbage()
    local r = p:replay({ seq(4, 1, dev) }, { synchronize = true })
    assert.same({ 6, 8, 10, 12 }, r:tolist())
    p:close()
    by_partial:close()
  end)

  it_("changes nothing under a GC storm inside fn and between replays", function()
    local fn = function(x, w)
      collectgarbage()
      local t = {}
      for i = 1, 50 do t[i] = x + i end -- garbage tensors
      t = nil
      collectgarbage()
      return step(x, w)
    end
    local prog = capture(fn, { seq(32, 0, dev), seq(32, 3, dev) })
    for k = 1, 10 do
      for _ = 1, 20 do local _ = seq(64, k, dev) * 2 end
      collectgarbage()
      local out = prog:replay({ seq(32, k, dev), seq(32, -k, dev) })
      collectgarbage()
      sync()
      assert.same(eager(seq(32, k, dev), seq(32, -k, dev)), got(out))
    end
    prog:close()
  end)

  it_("keeps two programs captured from one function independent", function()
    local p1 = capture(step, { seq(8, 0, dev), seq(8, 1, dev) })
    local p2 = capture(step, { seq(8, 0, dev), seq(8, 1, dev) })
    assert.are_not.equal(p1.output.y:data_ptr(), p2.output.y:data_ptr())
    p1:replay({ seq(8, 2, dev), seq(8, 3, dev) })
    p2:replay({ seq(8, 4, dev), seq(8, 5, dev) })
    sync()
    assert.same(eager(seq(8, 2, dev), seq(8, 3, dev)), got(p1.output))
    assert.same(eager(seq(8, 4, dev), seq(8, 5, dev)), got(p2.output))
    p1:close()
    assert.same(eager(seq(8, 4, dev), seq(8, 5, dev)), got(p2:replay({ seq(8, 4, dev), seq(8, 5, dev) },
      { synchronize = true })))
    p2:close()
  end)

  it_("handles nil outputs, outputs aliasing the inputs, and CKKS values in and out", function()
    local pn = capture(function(x) x:mul_(2) end, { seq(4, 1, dev) })
    assert.is_nil(pn.output)
    assert.is_nil(pn:replay({ seq(4, 1, dev) }))
    assert.is_nil(pn:replay({ seq(4, 1, dev) }, { copy_output = true }))
    pn:close()
    local pa = capture(function(x) x:mul_(2); return x end, { seq(4, 1, dev) })
    assert.same({ 6, 8, 10, 12 }, pa:replay({ seq(4, 3, dev) }, { synchronize = true }):tolist())
    pa:close()
    local data = fh.arange(0, 2 * 3 * N, 1, { dtype = "uint64" }):view({ 2, 3, N })
    local ct = fh.Ciphertext { data = dev == "cpu" and data or data:to(dev), context = ctx, scale = 64.0 }
    local pv = capture(function(c)
      return fh.Ciphertext { data = c.data + c.data, context = ctx, scale = c.scale * 2 }
    end, { ct })
    local out = pv:replay({ ct })
    sync()
    assert.equal("Ciphertext", out.type)
    assert.equal(128.0, out.scale)
    assert.same((data + data):tolist(), out.data:tolist())
    pv:close()
  end)
end

describe("HostGraphProgram", function()
  suite(ex.HostGraphProgram, "cpu", it)

  it("refuses CUDA inputs and cpu-only rules hold (no streams on a host program)", function()
    local prog = ex.HostGraphProgram.capture(step, { example_inputs = { seq(4), seq(4) } })
    local h = prog:copy_inputs_from({ seq(4, 1), seq(4, 1) })
    assert.is_nil(h.event)
    assert.is_true(h:done())
    prog:replay_prepared({ copy_handle = h })
    prog:close()
    if H.has_gpu then
      H.expect_error("ValueError", "must be on the cpu", ex.HostGraphProgram.capture, step,
        { example_inputs = { seq(4):cuda(), seq(4):cuda() } })
      local p = ex.HostGraphProgram.capture(step, { example_inputs = { seq(4), seq(4) } })
      H.expect_error("ValueError", "stream applies only to CUDA targets", p.copy_inputs_from, p,
        { seq(4), seq(4) }, { stream = fh.cuda.Stream() })
      p:close()
    end
  end)
end)

describe("CudaGraphProgram", function()
  suite(ex.CudaGraphProgram, "cuda:0", H.gpu_it)

  it("needs example inputs on one CUDA device", function()
    local err = H.expect_error("ValueError", "example_inputs must be on one CUDA device, got cpu",
      ex.CudaGraphProgram.capture, step, { example_inputs = { seq(4), seq(4) } })
    assert.is_nil(err.stage)
  end)

  local function spin(ms, s) fh.cuda._spin(ms, s) end

  H.gpu_it("warms up on a side stream, captures into a private pool", function()
    local streams = {}
    local prog = ex.CudaGraphProgram.capture(function(x)
      streams[#streams + 1] = fh.cuda.current_stream()
      return x * 3
    end, { example_inputs = { seq(1024, 0, "cuda:0") } })
    local cur = fh.cuda.current_stream()
    for i = 1, #streams do assert.are_not.equal(cur, streams[i]) end
    assert.is_true(prog.stats.memory_reserved_bytes >= 1024 * 8)
    assert.equal(cur, fh.cuda.current_stream())
    prog:close()
  end)

  H.gpu_it("fails an unjoined fork at stage 'capture', naming the stream; the device stays usable", function()
    local fork = fh.cuda.Stream()
    local err = H.expect_error("CudaGraphCaptureError",
      { "capture failed", "not joined back", "stream " .. tostring(fork.id) },
      ex.CudaGraphProgram.capture, function(x)
        fork:wait_stream(fh.cuda.current_stream())
        local y = fh.cuda.with_stream(fork, function() return x * 2 end)
        return y
      end, { example_inputs = { seq(64, 0, "cuda:0") }, warmup = 0 })
    assert.equal("capture", err.stage)
    assert.same({ 3, 5 }, (f64({ 1, 2 }, "cuda:0") * 2 + 1):tolist())
    local y = fh.cuda.with_stream(fork, function() return f64({ 1, 2 }, "cuda:0") + 1 end)
    fork:synchronize()
    assert.same({ 2, 3 }, y:tolist())
  end)

  H.gpu_it("keeps forked work joined back inside fn, with correct results", function()
    local a, b = fh.cuda.Stream(), fh.cuda.Stream()
    local fn = function(x, w)
      local cur = fh.cuda.current_stream()
      a:wait_stream(cur)
      b:wait_stream(cur)
      local p = fh.cuda.with_stream(a, function() return x * w end)
      local q = fh.cuda.with_stream(b, function() return x + w end)
      cur:wait_stream(a)
      cur:wait_stream(b)
      return p - q
    end
    local prog = ex.CudaGraphProgram.capture(fn, { example_inputs = { seq(256, 0, "cuda:0"), seq(256, 1, "cuda:0") } })
    local out = prog:replay({ seq(256, 3, "cuda:0"), seq(256, 4, "cuda:0") }, { synchronize = true })
    local ref = seq(256, 3) * seq(256, 4) - (seq(256, 3) + seq(256, 4))
    assert.same(ref:tolist(), out:tolist())
    prog:close()
  end)

  H.gpu_it("fails a synchronize inside fn at stage 'capture' instead of hanging", function()
    local err = H.expect_error("CudaGraphCaptureError", "capture failed", ex.CudaGraphProgram.capture,
      function(x) local y = x + 1; fh.cuda.current_stream():synchronize(); return y end,
      { example_inputs = { seq(64, 0, "cuda:0") }, warmup = 0 })
    assert.equal("capture", err.stage)
    check_eager_op("cuda:0")
  end)

  H.gpu_it("leaves nothing allocated after a failed capture", function()
    collectgarbage()
    collectgarbage()
    local before = fh.cuda.memory_stats().allocated
    H.expect_error("CudaGraphCaptureError", "capture failed", ex.CudaGraphProgram.capture,
      function(x) local y = x * 2; local _ = y:tolist(); return y end,
      { example_inputs = { seq(65536, 0, "cuda:0") }, warmup = 2 })
    collectgarbage()
    collectgarbage()
    assert.equal(before, fh.cuda.memory_stats().allocated)
    assert.equal(0, fh.cuda.memory_stats().deferred_frees)
  end)

  H.gpu_it("orders the prepared path: copy on a transfer stream, replay on a compute stream", function()
    local prog = ex.CudaGraphProgram.capture(step, { example_inputs = { seq(4096, 0, "cuda:0"), seq(4096, 0, "cuda:0") } })
    local transfer, compute = fh.cuda.Stream(), fh.cuda.Stream()
    local x, w = seq(4096, 7):pin_memory(), seq(4096, 2):pin_memory()
    spin(100, transfer) -- the copy lands late; the replay must wait for it
    local h = prog:copy_inputs_from({ x, w }, { stream = transfer })
    local out = fh.cuda.with_stream(compute, function() return prog:replay_prepared({ copy_handle = h }) end)
    compute:synchronize()
    assert.same(eager(seq(4096, 7), seq(4096, 2)), got(out))
    -- the next copy waits for the replay that reads the inputs
    spin(100, compute)
    fh.cuda.with_stream(compute, function() prog:replay_prepared() end)
    local h2 = prog:copy_inputs_from({ seq(4096, 1):pin_memory(), seq(4096, 1):pin_memory() }, { stream = transfer })
    local snapshot = fh.cuda.with_stream(compute, function() return prog.output.y + 0 end)
    compute:synchronize()
    assert.same(eager(seq(4096, 7), seq(4096, 2))[1], snapshot:tolist())
    h2:synchronize()
    prog:close()
  end)

  H.gpu_it("_push orders the replay after its copy and the read-back after the replay", function()
    local prog = ex.CudaGraphProgram.capture(step, { example_inputs = { seq(4096, 0, "cuda:0"), seq(4096, 0, "cuda:0") } })
    local cin, cs, cout = fh.cuda.Stream(), fh.cuda.Stream(), fh.cuda.Stream()
    -- the copy lands late: the replay must wait for it
    spin(100, cin)
    local out, ev = prog:_push({ seq(4096, 7):pin_memory(), seq(4096, 2):pin_memory() }, cin, nil, cs, cout)
    ev:synchronize()
    assert.same(eager(seq(4096, 7), seq(4096, 2)), got(out))
    -- the replay runs late: the read-back must wait for it
    spin(100, cs)
    local out2, ev2 = prog:_push({ seq(4096, 1):pin_memory(), seq(4096, 3):pin_memory() }, cin, ev, cs, cout)
    ev2:synchronize()
    assert.same(eager(seq(4096, 1), seq(4096, 3)), got(out2))
    -- the consumer event: the copy waits for it (a read-back held back on cout)
    spin(100, cout)
    local gate = cout:record_event()
    local out3, ev3 = prog:_push({ seq(4096, 4):pin_memory(), seq(4096, 5):pin_memory() }, cin, gate, cs, cout)
    assert.is_false(prog.replay_event:query())
    ev3:synchronize()
    assert.same(eager(seq(4096, 4), seq(4096, 5)), got(out3))
    prog:close()
  end)

  H.gpu_it("replay_prepared{stream = s} launches on s, as under with_stream, and leaves the current stream", function()
    local prog = ex.CudaGraphProgram.capture(step, { example_inputs = { seq(4096, 0, "cuda:0"), seq(4096, 0, "cuda:0") } })
    local transfer, compute = fh.cuda.Stream(), fh.cuda.Stream()
    local before = fh.cuda.current_stream()
    spin(100, compute) -- the replay on compute queues behind this
    local h = prog:copy_inputs_from({ seq(4096, 7):pin_memory(), seq(4096, 2):pin_memory() }, { stream = transfer })
    local out = prog:replay_prepared({ copy_handle = h, stream = compute })
    assert.equal(before, fh.cuda.current_stream())
    -- not on the current stream: that one is idle, the replay still waits on compute
    before:synchronize()
    transfer:synchronize()
    assert.is_false(prog.replay_event:query())
    compute:synchronize()
    assert.is_true(prog.replay_event:query())
    assert.same(eager(seq(4096, 7), seq(4096, 2)), got(out))
    prog:close()
    -- a host program has no stream to launch on
    local host = ex.HostGraphProgram.capture(step, { example_inputs = { seq(4, 0), seq(4, 0) } })
    H.expect_error("ValueError", { "HostGraphProgram:replay_prepared", "option 'stream'", "no stream to launch on" },
      host.replay_prepared, host, { stream = compute })
    host:close()
  end)

  H.gpu_it("replays two programs concurrently on two streams", function()
    local p1 = ex.CudaGraphProgram.capture(step, { example_inputs = { seq(4096, 0, "cuda:0"), seq(4096, 0, "cuda:0") } })
    local p2 = ex.CudaGraphProgram.capture(step, { example_inputs = { seq(4096, 0, "cuda:0"), seq(4096, 0, "cuda:0") } })
    local s1, s2 = fh.cuda.Stream(), fh.cuda.Stream()
    local in1, in2 = {}, {}
    for k = 1, 5 do
      in1[k] = { seq(4096, k, "cuda:0"), seq(4096, 1, "cuda:0") }
      in2[k] = { seq(4096, -k, "cuda:0"), seq(4096, 2, "cuda:0") }
    end
    for k = 1, 5 do
      fh.cuda.with_stream(s1, function() spin(5, s1); p1:replay(in1[k]) end)
      fh.cuda.with_stream(s2, function() p2:replay(in2[k]) end)
    end
    s1:synchronize()
    s2:synchronize()
    assert.same(eager(seq(4096, 5), seq(4096, 1)), got(p1.output))
    assert.same(eager(seq(4096, -5), seq(4096, 2)), got(p2.output))
    p1:close()
    p2:close()
  end)

  H.gpu_it("orders a replay on another stream after the previous replay", function()
    local prog = ex.CudaGraphProgram.capture(function(x) x:add_(1); return x end,
      { example_inputs = { seq(4096, 0, "cuda:0") } })
    local s1, s2 = fh.cuda.Stream(), fh.cuda.Stream()
    fh.cuda.with_stream(s1, function() spin(100, s1); prog:replay_prepared() end)
    fh.cuda.with_stream(s2, function() prog:replay_prepared() end)
    s2:synchronize()
    assert.equal(3, prog.output:narrow(1, 1, 1):tolist()[1]) -- 0 + first replay + two replays
    prog:close()
  end)

  H.gpu_window_it("close waits for pending replays and copies; GC of an unclosed program never frees early", function()
    local prog = ex.CudaGraphProgram.capture(step, { example_inputs = { seq(65536, 0, "cuda:0"), seq(65536, 0, "cuda:0") } })
    local s = fh.cuda.current_stream()
    -- inputs first: creating a CUDA tensor from host data synchronizes the stream
    local inputs = { seq(65536, 1, "cuda:0"), seq(65536, 1, "cuda:0") }
    spin(100, s)
    prog:replay(inputs)
    local e = prog.replay_event
    assert.is_false(e:query())
    prog:close()
    assert.is_true(e:query())
    local p2 = ex.CudaGraphProgram.capture(step, { example_inputs = { seq(65536, 0, "cuda:0"), seq(65536, 0, "cuda:0") } })
    local addr = p2.output.y:data_ptr()
    spin(200, s)
    p2:replay(inputs)
    local e2 = p2.replay_event
    p2 = nil
    collectgarbage()
    collectgarbage()
    assert.is_false(e2:query())
    for _ = 1, 8 do
      local t = fh.zeros({ 65536 }, { dtype = "float64", device = "cuda:0" })
      assert.are_not.equal(addr, t:data_ptr(), "a pool block was reused while a replay still writes it")
    end
    e2:synchronize()
    -- the parked program is finished by the next sweep
    local p3 = ex.CudaGraphProgram.capture(step, { example_inputs = { seq(4, 0, "cuda:0"), seq(4, 0, "cuda:0") } })
    p3:close()
  end)

  -- replay() moves small leaves from pinned host memory with one batch
  -- kernel on the replay stream (engine/exec/buffer.c, copy_small_pinned)
  -- instead of copy-engine transfers; everything else takes cudaMemcpyAsync.
  local function launches() return fh.info().launches end

  H.gpu_it("copies small pinned inputs with one kernel, any alignment and layout, mixed with other sources", function()
    -- leaves: float64 contiguous, uint8 at an odd offset (1-byte units), a
    -- non-contiguous view (same strides on both sides: the span is copied
    -- with its gaps), a pageable leaf, a device leaf, a pinned leaf over the
    -- batch limit (64 KiB: the copy engine)
    local function fn(a, b, c, d, e, f)
      return { a * 2, b + 1, c * 3, d - 1, e + 5, f * 0.5 }
    end
    local big = 16384 -- float64: 128 KiB
    -- where: "cuda:0", "pinned" or nil (pageable); views are made in place,
    -- so every source has the example's strides
    local function make(k, where)
      local function place(t)
        if where == "pinned" then return t:pin_memory() end
        return where and t:to(where) or t
      end
      local u8 = place(fh.arange(0, 16, 1, { dtype = "uint8" }):add_(k)):narrow(1, 2, 7)
      local g = place(seq(32, k)):reshape({ 4, 8 }):narrow(2, 2, 3)
      local pageable = where == "cuda:0" and seq(64, k, "cuda:0") or seq(64, k)
      return { place(seq(512, k)), u8, g, pageable, seq(64, 3 * k, "cuda:0"), place(seq(big, -k)) }
    end
    local prog = ex.CudaGraphProgram.capture(fn, { example_inputs = make(0, "cuda:0") })
    assert.is_false(prog:_input_value()[3]:is_contiguous())
    for k = 1, 3 do
      local src = make(k, "pinned")
      assert.is_true(src[1]:is_pinned() and src[2]:is_pinned() and src[3]:is_pinned() and src[6]:is_pinned())
      assert.equal(1, src[2]:storage_offset() % 2) -- odd address: 1-byte units
      fh.cuda.synchronize()
      local before = launches()
      local out = prog:replay(src, { synchronize = true })
      -- one batch for the three small pinned leaves, one copy kernel for the
      -- device leaf; the pageable and the large pinned leaf use the copy engine
      assert.equal(2, launches() - before)
      local ref = fn(unpack(make(k)))
      for i = 1, 6 do assert.same(ref[i]:tolist(), out[i]:tolist()) end
    end
    prog:close()
  end)

  H.gpu_it("splits small pinned inputs into batches of at most 32 leaves and 64 KiB", function()
    local fn = function(...)
      local r = {}
      for i, t in ipairs({ ... }) do r[i] = t + i end
      return r
    end
    local function args(n, len, k, pin)
      local r = {}
      for i = 1, n do
        local t = seq(len, k * 100 + i)
        r[i] = pin and t:pin_memory() or t:to("cuda:0")
      end
      return r
    end
    for _, case in ipairs({ { 40, 4, 2 }, { 3, 4096, 2 }, { 32, 4, 1 } }) do
      local n, len, want = case[1], case[2], case[3] -- 40 tiny leaves; 3 x 32 KiB; 32 tiny
      local prog = ex.CudaGraphProgram.capture(fn, { example_inputs = args(n, len, 0, false), warmup = 0 })
      local src = args(n, len, 1, true)
      fh.cuda.synchronize()
      local before = launches()
      local out = prog:replay(src, { synchronize = true })
      assert.equal(want, launches() - before)
      for i = 1, n do assert.same((seq(len, 100 + i) + i):tolist(), out[i]:tolist()) end
      prog:close()
    end
  end)

  H.gpu_it("orders the batch copy after pending work and guards the pinned sources", function()
    local prog = ex.CudaGraphProgram.capture(function(x) return x * 2 end,
      { example_inputs = { seq(512, 0, "cuda:0") } })
    local s1, s2 = fh.cuda.Stream(), fh.cuda.Stream()
    -- a replay on another stream waits for the previous replay, which reads
    -- the inputs late: its owned output still sees its own inputs
    local x1, x2 = seq(512, 1):pin_memory(), seq(512, 1000):pin_memory()
    local o1 = fh.cuda.with_stream(s1, function()
      spin(100, s1)
      return prog:replay({ x1 }, { copy_output = true })
    end)
    local o2 = fh.cuda.with_stream(s2, function() return prog:replay({ x2 }) end)
    s2:synchronize()
    s1:synchronize()
    assert.same((seq(512, 1) * 2):tolist(), o1:tolist())
    assert.same((seq(512, 1000) * 2):tolist(), o2:tolist())
    -- after a pending copy_inputs_from on a transfer stream: replay() writes last
    local transfer = fh.cuda.Stream()
    spin(100, transfer)
    local h = prog:copy_inputs_from({ seq(512, 7):pin_memory() }, { stream = transfer })
    local out = prog:replay({ seq(512, 9):pin_memory() }, { synchronize = true })
    h:synchronize()
    assert.same((seq(512, 9) * 2):tolist(), out:tolist())
    assert.same(seq(512, 9):tolist(), prog:_input_value()[1]:tolist())
    -- a pinned source dropped right after replay() returns is not reused
    -- before the kernel has read it
    local s = fh.cuda.current_stream()
    spin(200, s)
    local src = seq(512, 42):pin_memory()
    local addr = src:data_ptr()
    prog:replay({ src })
    src = nil
    collectgarbage()
    collectgarbage()
    for _ = 1, 8 do
      local t = fh.zeros({ 512 }, { dtype = "float64", pin_memory = true })
      assert.are_not.equal(addr, t:data_ptr(), "a pinned source was reused before the copy kernel read it")
    end
    s:synchronize()
    assert.same((seq(512, 42) * 2):tolist(), prog.output:tolist())
    prog:close()
  end)

  H.gpu_it("rejects outputs on another device at the warmup stage", function()
    local err = H.expect_error("CudaGraphCaptureError", { "warmup failed", "outputs must live on the capture device" },
      ex.CudaGraphProgram.capture, function(x) return fh.zeros({ 2 }) end,
      { example_inputs = { seq(4, 0, "cuda:0") } })
    assert.equal("warmup", err.stage)
  end)
end)
