-- ReusableValueBuffer and CopyHandle (docs/api.md "Execution: buffers and copy
-- handles"): structure, validation before the first byte, stable addresses,
-- sources of every kind, source lifetime, stream ordering, close.
local fh = require "fhelium"
local ex = require "fhelium.execution"
local H = require "spec.helpers"
local T = require "spec.fixtures.small_context"

local ctx = T.context()
local N = ctx.ring_degree

local function f64(t) return fh.tensor(t, { dtype = "float64" }) end
local function seq(n, start, dtype)
  return fh.arange(start or 0, (start or 0) + n, 1, { dtype = dtype or "float64" })
end
local function u64(shape, start)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return fh.arange(start or 0, (start or 0) + n, 1, { dtype = "uint64" }):view(shape)
end

-- A nested example: dict of list, tuple, a transposed (non-contiguous) view,
-- a slots plaintext and a ciphertext.
local function example(k)
  k = k or 0
  return {
    a = { seq(4, k), seq(6, 10 + k):view({ 2, 3 }):transpose(1, 2) },
    t = ex.tuple(seq(3, 100 + k, "int64")),
    pt = fh.Plaintext { message = seq(4, 200 + k), level = 0, scale = 16.0 },
    ct = fh.Ciphertext { data = u64({ 2, 3, N }, 1000 * (k + 1)), context = ctx, level = 0 },
  }
end

local function leaves(tree)
  local r = {}
  local function walk(x)
    if fh.is_tensor(x) then r[#r + 1] = x
    elseif fh.is_value(x) then r[#r + 1] = x.data or x.message
    else
      local keys = {}
      for key in pairs(x) do keys[#keys + 1] = key end
      table.sort(keys, function(p, q) return tostring(p) < tostring(q) end)
      for _, key in ipairs(keys) do walk(x[key]) end
    end
  end
  walk(tree)
  return r
end

local function same_lists(a, b)
  local la, lb = leaves(a), leaves(b)
  assert.equal(#la, #lb)
  for i = 1, #la do assert.same(la[i]:tolist(), lb[i]:tolist()) end
end

describe("ReusableValueBuffer", function()
  describe("like", function()
    it("builds an independent tree with the example's structure, metadata and strides, initialised with a copy", function()
      local e = example()
      local buf = ex.ReusableValueBuffer.like(e)
      assert.equal("cpu", buf.device)
      assert.is_false(buf.is_pinned)
      assert.is_false(buf:is_closed())
      assert.is_true(buf.signature == ex.ValueTreeSignature.from_value(e))
      assert.equal(ex.value_tree_nbytes(e), buf.nbytes)
      local v = buf.value
      assert.is_true(ex.is_tuple(v.t))
      assert.same({ 3, 2 }, v.a[2].shape)
      assert.same({ 1, 3 }, v.a[2]:stride())
      assert.equal("Ciphertext", v.ct.type)
      assert.equal(e.ct.level, v.ct.level)
      assert.equal(e.ct.scale, v.ct.scale)
      assert.same(e.ct.prime_ids, v.ct.prime_ids)
      assert.equal(16.0, v.pt.scale)
      same_lists(e, v)
      -- independent storage: changing the example does not change the buffer
      for i, l in ipairs(leaves(e)) do assert.are_not.equal(l:data_ptr(), leaves(v)[i]:data_ptr()) end
      e.a[1]:fill_(-1)
      assert.same({ 0, 1, 2, 3 }, buf.value.a[1]:tolist())
    end)

    it("gives equal addresses and fresh objects on every access to value", function()
      local buf = ex.ReusableValueBuffer.like({ seq(4), seq(2) })
      local v1, v2 = buf.value, buf.value
      assert.are_not.equal(v1, v2)
      assert.are_not.equal(v1[1], v2[1])
      assert.equal(v1[1]:data_ptr(), v2[1]:data_ptr())
      assert.equal(v1[2]:data_ptr(), v2[2]:data_ptr())
    end)

    it("rejects trees without tensor leaves", function()
      H.expect_error("ValueError", "example has no tensor leaves", ex.ReusableValueBuffer.like, {})
      H.expect_error("ValueError", "example has no tensor leaves", ex.ReusableValueBuffer.like, { a = {}, b = { {} } })
    end)

    it("rejects unsupported leaves with a TypeError naming the path", function()
      local err = H.expect_error("TypeError", { "example%[2%]", "unsupported leaf: a number" },
        ex.ReusableValueBuffer.like, { seq(2), 3 })
      assert.equal("example[2]", err.path)
      H.expect_error("TypeError", { 'example%["f"%]', "a function" }, ex.ReusableValueBuffer.like,
        { f = print, x = seq(2) })
      H.expect_error("TypeError", "a string", ex.ReusableValueBuffer.like, { seq(2), "x" })
    end)

    it("rejects leaves that share a storage, naming both", function()
      local t = seq(8)
      H.expect_error("ValueError", { "example%[1%] and example%[2%] share one storage", "aliased" },
        ex.ReusableValueBuffer.like, { t, t })
      H.expect_error("ValueError", { 'example%["a"%] and example%["b"%] share one storage' },
        ex.ReusableValueBuffer.like, { a = t:narrow(1, 1, 4), b = t:narrow(1, 5, 4) })
    end)

    it("rejects pin_memory with a non-cpu target and unknown options", function()
      H.expect_error("ValueError", "pin_memory=true requires a cpu target, got cuda:0", ex.ReusableValueBuffer.like,
        { seq(2) }, { device = "cuda:0", pin_memory = true })
      H.expect_error("ValueError", "unknown option 'pinned'", ex.ReusableValueBuffer.like, { seq(2) }, { pinned = true })
      H.expect_error("ValueError", "invalid device string", ex.ReusableValueBuffer.like, { seq(2) }, { device = "gpu" })
    end)

    if not H.has_gpu then
      it("reports CUDA as unavailable for pinned memory and CUDA targets without a GPU", function()
        H.expect_error("CudaError", "no CUDA device", ex.ReusableValueBuffer.like, { seq(2) }, { pin_memory = true })
        H.expect_error("CudaError", "no CUDA device", ex.ReusableValueBuffer.like, { seq(2) }, { device = "cuda:0" })
        H.expect_error("CudaError", "no CUDA device", ex.pin_value_tree, { seq(2) })
      end)
    end
  end)

  describe("copy_from (cpu target)", function()
    it("copies every leaf synchronously and returns a handle without event", function()
      local buf = ex.ReusableValueBuffer.like(example(0))
      local src = example(7)
      local h = buf:copy_from(src)
      assert.equal("cpu", h.device)
      assert.is_nil(h.event)
      assert.equal(buf.nbytes, h.bytes_copied)
      assert.is_true(h:done())
      assert.equal(h, h:synchronize())
      same_lists(src, buf.value)
      assert.equal(buf, buf:wait_for(h))
    end)

    it("keeps the target addresses across many payload replacements", function()
      local buf = ex.ReusableValueBuffer.like({ x = seq(16), y = seq(6):view({ 2, 3 }):transpose(1, 2) })
      local px, py = buf.value.x:data_ptr(), buf.value.y:data_ptr()
      for k = 1, 200 do
        buf:copy_from({ x = seq(16, k), y = seq(6, 2 * k):view({ 2, 3 }):transpose(1, 2) })
        assert.equal(px, buf.value.x:data_ptr())
        assert.equal(py, buf.value.y:data_ptr())
      end
      assert.same(seq(16, 200):tolist(), buf.value.x:tolist())
      assert.same(seq(6, 400):view({ 2, 3 }):transpose(1, 2):tolist(), buf.value.y:tolist())
    end)

    it("lets any eager operator consume buf.value", function()
      local buf = ex.ReusableValueBuffer.like({ a = seq(4), b = seq(4, 10) })
      local v = buf.value
      assert.same({ 10, 12, 14, 16 }, (v.a + v.b):tolist())
      v.a:add_(v.b) -- in place through the view: the buffer sees it
      assert.same({ 10, 12, 14, 16 }, buf.value.a:tolist())
    end)

    local function expect_untouched(buf, before)
      local now = leaves(buf.value)
      for i, l in ipairs(leaves(before)) do assert.same(l:tolist(), now[i]:tolist()) end
    end

    it("detects every mismatch before the first byte moves (target unchanged element by element)", function()
      local e = example(0)
      local buf = ex.ReusableValueBuffer.like(e)
      local cases = {
        -- the last leaf in depth-first order (dict keys sorted: a, ct, pt, t) is wrong
        { "shape mismatch", function(s) s.t = ex.tuple(seq(4, 0, "int64")) end, 't"%]%[1%]' },
        { "dtype mismatch", function(s) s.t = ex.tuple(seq(3, 0, "int32")) end, 't"%]%[1%]' },
        { "requires_grad mismatch", function(s) s.t = ex.tuple(seq(3, 0, "int64"):requires_grad_(true)) end, 't"%]%[1%]' },
        { "stride mismatch", function(s) s.a[2] = seq(6, 0):view({ 3, 2 }) end, 'a"%]%[2%]' },
        { "kind mismatch: expected a tuple of length 1, got a list", function(s) s.t = { seq(3, 0, "int64") } end, 't"%]' },
        { "length mismatch", function(s) s.a[3] = seq(1) end, 'a"%]' },
        { "missing key", function(s) s.pt = nil end, "" },
        { "unexpected key", function(s) s.zz = seq(1) end, "" },
        { "level mismatch", function(s)
          s.ct = fh.Ciphertext { data = u64({ 2, 2, N }), context = ctx, level = 1 } end, 'ct"%]' },
        { "scale mismatch", function(s)
          s.pt = fh.Plaintext { message = seq(4, 200), level = 0, scale = 32.0 } end, 'pt"%]' },
      }
      for _, c in ipairs(cases) do
        local s = example(5)
        c[2](s)
        local err = H.expect_error("ExecutionInputError", { c[1], c[3] == "" and "^ReusableValueBuffer:copy_from: source: " or ('^ReusableValueBuffer:copy_from: source%["' .. c[3]) }, buf.copy_from, buf, s)
        assert.is_string(err.path)
        expect_untouched(buf, e)
      end
      local bad = example(5)
      bad.t = ex.tuple(5) -- the last leaf is no tensor: nothing was copied before it was found
      H.expect_error("TypeError", { '^ReusableValueBuffer:copy_from: source%["t"%]%[1%]', "unsupported leaf" }, buf.copy_from, buf, bad)
      expect_untouched(buf, e)
    end)

    it("rejects bad options before copying", function()
      local buf = ex.ReusableValueBuffer.like({ seq(2) })
      H.expect_error("ValueError", "unknown option 'blocking'", buf.copy_from, buf, { seq(2, 5) }, { blocking = true })
      H.expect_error("TypeError", "wait_for' expected an Event or a list of Events, got number", buf.copy_from, buf,
        { seq(2, 5) }, { wait_for = 3 })
      H.expect_error("TypeError", "expected a Stream", buf.copy_from, buf, { seq(2, 5) }, { stream = 1 })
      H.expect_error("TypeError", "argument 1 %(source%) is missing", buf.copy_from, buf)
      assert.same({ 0, 1 }, buf.value[1]:tolist())
    end)

    it("rejects a handle of another buffer in wait_for (ExecutionInputError)", function()
      local b1 = ex.ReusableValueBuffer.like({ seq(2) })
      local b2 = ex.ReusableValueBuffer.like({ seq(2) })
      local h = b2:copy_from({ seq(2, 3) })
      H.expect_error("ExecutionInputError", "belongs to another buffer", b1.wait_for, b1, h)
      H.expect_error("TypeError", "expected a CopyHandle", b1.wait_for, b1, {})
    end)
  end)

  describe("close", function()
    it("is idempotent and makes every later use an ExecutionError", function()
      local buf = ex.ReusableValueBuffer.like({ x = seq(4) })
      local h = buf:copy_from({ x = seq(4, 1) })
      buf:close()
      assert.is_true(buf:is_closed())
      buf:close()
      H.expect_error("ExecutionError", "ReusableValueBuffer.value: the buffer is closed", function() return buf.value end)
      H.expect_error("ExecutionError", "closed", buf.copy_from, buf, { x = seq(4) })
      H.expect_error("ExecutionError", "closed", buf.wait_for, buf, h)
      H.expect_error("ExecutionError", "closed", function() return buf.signature end)
      H.expect_error("ExecutionError", "closed", function() return buf.nbytes end)
      assert.equal("ReusableValueBuffer(closed)", tostring(buf))
    end)

    it("leaves views taken before close valid (the buffer drops only its own references)", function()
      local buf = ex.ReusableValueBuffer.like({ seq(4, 3) })
      local v = buf.value
      buf:close()
      collectgarbage()
      assert.same({ 3, 4, 5, 6 }, v[1]:tolist())
    end)

    it("frees its storage once closed and unreferenced", function()
      collectgarbage()
      local before = fh.info().cpu_allocated_bytes
      local buf = ex.ReusableValueBuffer.like({ fh.zeros({ 1024 }, { dtype = "float64" }) })
      collectgarbage()
      assert.is_true(fh.info().cpu_allocated_bytes >= before + 8192)
      buf:close()
      collectgarbage()
      assert.is_true(fh.info().cpu_allocated_bytes < before + 8192)
    end)
  end)

  it("runs examples/double_buffering.lua (CUDA streams with a GPU, synchronous copies without)", function()
    dofile("examples/double_buffering.lua")
  end)

  describe("in coroutines", function()
    -- buffers and copy handles belong to whoever references them, not to
    -- the coroutine that made them: they cross coroutines, and a coroutine
    -- that is abandoned and collected takes nothing with it that others use
    it("uses a buffer and its handles from any coroutine; an abandoned coroutine leaves them intact", function()
      local co = coroutine.create(function()
        local buf = ex.ReusableValueBuffer.like({ seq(4) })
        local h = buf:copy_from({ seq(4, 10) })
        coroutine.yield(buf, h)
        error("never resumed")
      end)
      local ok, buf, h = coroutine.resume(co)
      assert.is_true(ok)
      co = nil -- abandoned while suspended
      collectgarbage()
      collectgarbage()
      assert.is_true(h:done())
      assert.same({ 10, 11, 12, 13 }, buf.value[1]:tolist())
      -- and the main coroutine goes on using it, as does another coroutine
      buf:copy_from({ seq(4, 20) })
      local co2 = coroutine.wrap(function(b) b:copy_from({ seq(4, 30) }); coroutine.yield(b.value[1]:tolist()) end)
      assert.same({ 30, 31, 32, 33 }, co2(buf))
      buf:close()
      -- a buffer only the abandoned coroutine referenced is collected like any other
      local weak = setmetatable({}, { __mode = "v" })
      local co3 = coroutine.create(function()
        local b = ex.ReusableValueBuffer.like({ seq(4) })
        weak[1] = b
        coroutine.yield()
      end)
      assert.is_true(coroutine.resume(co3))
      co3 = nil
      collectgarbage()
      collectgarbage()
      assert.is_nil(weak[1])
    end)

    H.gpu_it("keeps a pending copy's sources alive after the coroutine that submitted it is collected", function()
      local buf = ex.ReusableValueBuffer.like({ seq(65536):cuda() })
      local s = fh.cuda.Stream()
      local weak = setmetatable({}, { __mode = "v" })
      local co = coroutine.create(function()
        local src = { seq(65536, 7):pin_memory() }
        weak[1] = src[1]
        fh.cuda._spin(200, s) -- the copy waits behind a long kernel
        local h = buf:copy_from(src, { stream = s })
        coroutine.yield(h)
      end)
      local ok, h = coroutine.resume(co)
      assert.is_true(ok)
      co = nil
      collectgarbage()
      collectgarbage()
      assert.is_false(h:done())
      assert.is_not_nil(weak[1], "the source was collected with its coroutine while the copy was pending")
      h:synchronize()
      assert.equal(7, buf.value[1]:narrow(1, 1, 1):tolist()[1])
      buf:close()
    end)
  end)

  describe("tree helpers", function()
    it("value_tree_nbytes sums the leaves' bytes", function()
      assert.equal(4 * 8 + 3 * 8, ex.value_tree_nbytes({ seq(4), { x = seq(3, 0, "int64") } }))
      assert.equal(2 * 3 * N * 8, ex.value_tree_nbytes(fh.Ciphertext { data = u64({ 2, 3, N }), context = ctx }))
      assert.equal(0, ex.value_tree_nbytes({}))
      H.expect_error("TypeError", "unsupported leaf", ex.value_tree_nbytes, { 1 })
      H.expect_error("TypeError", "ex.value_tree_nbytes: argument 1 %(tree%) is missing", ex.value_tree_nbytes)
      H.expect_error("TypeError", "ex.pin_value_tree: argument 1 %(tree%) is missing", ex.pin_value_tree)
    end)
  end)

  describe("argument errors", function()
    it("name the method, the argument and what came", function()
      local buf = ex.ReusableValueBuffer.like({ seq(4) })
      H.expect_error("TypeError", "ex.ReusableValueBuffer.like: argument 1 %(example%) is missing",
        ex.ReusableValueBuffer.like)
      H.expect_error("TypeError", "ReusableValueBuffer:copy_from: expected a ReusableValueBuffer, got number",
        buf.copy_from, 5, { seq(4) })
      H.expect_error("TypeError", "ReusableValueBuffer:copy_from: argument 1 %(source%) is missing", buf.copy_from, buf)
      H.expect_error("TypeError", "ReusableValueBuffer:copy_from: option 'wait_for' expected an Event or a list of "
        .. "Events, got number", buf.copy_from, buf, { seq(4) }, { wait_for = 5 })
      H.expect_error("TypeError", "ReusableValueBuffer:copy_from: wait_for%[1%] expected an Event, got number",
        buf.copy_from, buf, { seq(4) }, { wait_for = { 5 } })
      H.expect_error("TypeError", "ReusableValueBuffer:wait_for: argument 1 %(handle%) expected a CopyHandle, got "
        .. "number", buf.wait_for, buf, 5)
      H.expect_error("TypeError", "ReusableValueBuffer: cannot set field 'value' %(buffers are read%-only%)",
        function() buf.value = 5 end)
      buf:close()
    end)
  end)

  -- ---- CUDA ---------------------------------------------------------------------
  describe("on CUDA", function()
    local function spin(ms, s) fh.cuda._spin(ms, s) end

    H.gpu_it("allocates on the example's device or on device=, and rejects multi-device examples", function()
      local g = seq(4):cuda()
      local buf = ex.ReusableValueBuffer.like({ g, seq(2):cuda() })
      assert.equal("cuda:0", buf.device)
      assert.same({ 0, 1, 2, 3 }, buf.value[1]:tolist())
      H.expect_error("ValueError", { "several devices", "cuda:0 at example%[1%]", "cpu at example%[2%]" },
        ex.ReusableValueBuffer.like, { g, seq(2) })
      local b2 = ex.ReusableValueBuffer.like({ g, seq(2) }, { device = "cuda:0" })
      assert.same({ 0, 1 }, b2.value[2]:tolist())
      local b3 = ex.ReusableValueBuffer.like({ g, seq(2) }, { device = "cpu", pin_memory = true })
      assert.is_true(b3.is_pinned)
      assert.is_true(b3.value[1]:is_pinned())
      assert.same({ 0, 1, 2, 3 }, b3.value[1]:tolist())
    end)

    H.gpu_it("copies from pageable, pinned and CUDA sources, in any mix, into CUDA and cpu targets", function()
      local e = { a = seq(1000), b = seq(12):view({ 3, 4 }):transpose(1, 2), c = seq(5, 0, "int64") }
      for _, target in ipairs({ "cuda:0", "cpu" }) do
        local buf = ex.ReusableValueBuffer.like(e, { device = target })
        local src = {
          a = seq(1000, 3), -- pageable
          b = seq(12, 7):cuda():view({ 3, 4 }):transpose(1, 2), -- CUDA (non-contiguous)
          c = seq(5, 9, "int64"):pin_memory(), -- pinned
        }
        local h = buf:copy_from(src)
        h:synchronize()
        assert.is_true(h:done())
        same_lists(src, buf.value)
        assert.equal(target, h.device)
        if target == "cpu" then assert.is_nil(h.event) else assert.is_not_nil(h.event) end
      end
      local pinned = ex.pin_value_tree(e)
      assert.is_true(pinned.a:is_pinned())
      assert.same(e.b:stride(), pinned.b:stride())
      same_lists(e, pinned)
    end)

    H.gpu_window_it("keeps the exact source tensors alive until the copy event completes", function()
      local buf = ex.ReusableValueBuffer.like({ x = seq(65536):cuda() })
      local copy_stream = fh.cuda.Stream()
      local weak = setmetatable({}, { __mode = "v" })
      local src = { x = seq(65536, 5):pin_memory() }
      weak[1] = src.x
      spin(200, copy_stream) -- the copy waits behind a long kernel
      local h = buf:copy_from(src, { stream = copy_stream })
      src.x = nil -- empty the tree, then drop it
      src = nil
      collectgarbage()
      collectgarbage()
      assert.is_false(h:done())
      assert.is_not_nil(weak[1], "the source was collected while its copy was pending")
      h:synchronize()
      collectgarbage()
      collectgarbage()
      assert.is_nil(weak[1], "the handle kept its source after synchronize")
      assert.equal(5, buf.value.x:narrow(1, 1, 1):tolist()[1])
    end)

    H.gpu_window_it("does not hold a pageable source: it is staged before copy_from returns", function()
      local buf = ex.ReusableValueBuffer.like({ x = seq(65536):cuda() })
      local copy_stream = fh.cuda.Stream()
      local weak = setmetatable({}, { __mode = "v" })
      local src = { x = seq(65536, 6) }
      weak[1] = src.x
      spin(200, copy_stream) -- the copy waits behind a long kernel
      local h = buf:copy_from(src, { stream = copy_stream, non_blocking = true })
      src.x:fill_(9) -- changing the source after the call does not change the payload
      src = nil
      collectgarbage()
      collectgarbage()
      assert.is_false(h:done())
      assert.is_nil(weak[1], "the handle held a pageable source")
      h:synchronize()
      assert.equal(6, buf.value.x:narrow(1, 1, 1):tolist()[1])
      assert.equal(65541, buf.value.x:narrow(1, 65536, 1):tolist()[1])
      buf:close()
    end)

    H.gpu_it("orders a consumer stream after the copy with wait_on (cross-stream, long kernel)", function()
      local buf = ex.ReusableValueBuffer.like({ seq(4096):cuda() })
      local copy_stream, consumer = fh.cuda.Stream(), fh.cuda.Stream()
      spin(100, copy_stream)
      local h = buf:copy_from({ seq(4096, 1):pin_memory() }, { stream = copy_stream })
      assert.equal(h, h:wait_on(consumer))
      local out = fh.cuda.with_stream(consumer, function() return buf.value[1] * 2 end)
      consumer:synchronize()
      assert.equal(2, out:narrow(1, 1, 1):tolist()[1])
      assert.equal(8192, out:narrow(1, 4096, 1):tolist()[1])
      -- buf:wait_for does the same for the buffer's own handle
      local h2 = buf:copy_from({ seq(4096, 3):pin_memory() }, { stream = copy_stream })
      assert.equal(buf, buf:wait_for(h2, consumer))
      local out2 = fh.cuda.with_stream(consumer, function() return buf.value[1] + 0 end)
      consumer:synchronize()
      assert.equal(3, out2:narrow(1, 1, 1):tolist()[1])
    end)

    H.gpu_it("waits for wait_for events and for the buffer's own earlier copies", function()
      local buf = ex.ReusableValueBuffer.like({ seq(4096):cuda() })
      local s1, s2 = fh.cuda.Stream(), fh.cuda.Stream()
      spin(100, s1)
      buf:copy_from({ seq(4096, 100):pin_memory() }, { stream = s1 })
      -- a later copy on another stream lands after the earlier one
      local h = buf:copy_from({ seq(4096, 200):pin_memory() }, { stream = s2 })
      h:synchronize()
      s1:synchronize()
      assert.equal(200, buf.value[1]:narrow(1, 1, 1):tolist()[1])
      -- wait_for: a reader on s1 reads the old payload first
      local reader = fh.cuda.Stream()
      spin(100, reader)
      local snapshot = fh.cuda.with_stream(reader, function() return buf.value[1] + 0 end)
      local read_done = reader:record_event()
      local h3 = buf:copy_from({ seq(4096, 300):pin_memory() }, { stream = s2, wait_for = { read_done } })
      h3:synchronize()
      reader:synchronize()
      assert.equal(200, snapshot:narrow(1, 1, 1):tolist()[1])
      assert.equal(300, buf.value[1]:narrow(1, 1, 1):tolist()[1])
    end)

    H.gpu_it("rejects streams of another device and stream options on a cpu target", function()
      local s = fh.cuda.Stream()
      local cpu = ex.ReusableValueBuffer.like({ seq(4) })
      H.expect_error("ValueError", "the target is on cpu.*stream applies only to CUDA targets", cpu.copy_from, cpu,
        { seq(4) }, { stream = s })
      H.expect_error("ValueError", "wait_for applies only to CUDA targets", cpu.copy_from, cpu, { seq(4) },
        { wait_for = s:record_event() })
      local h = cpu:copy_from({ seq(4, 1) })
      H.expect_error("ValueError", "stream belongs to cuda:0 but the copy targeted cpu", h.wait_on, h, s)
      H.expect_error("ValueError", "no stream to order", cpu.wait_for, cpu, h, s)
      if fh.cuda.device_count() >= 2 then
        local buf = ex.ReusableValueBuffer.like({ seq(4):cuda() })
        local other = fh.cuda.Stream { device = 1 }
        H.expect_error("ValueError", "stream belongs to cuda:1", buf.copy_from, buf, { seq(4) }, { stream = other })
      end
    end)

    H.gpu_it("keeps CUDA target pointers stable across many payload replacements", function()
      local buf = ex.ReusableValueBuffer.like({ seq(4096):cuda(), seq(6):cuda():view({ 2, 3 }):transpose(1, 2) })
      local p1, p2 = buf.value[1]:data_ptr(), buf.value[2]:data_ptr()
      local s = fh.cuda.Stream()
      for k = 1, 100 do
        buf:copy_from({ seq(4096, k):pin_memory(), seq(6, k):view({ 2, 3 }):transpose(1, 2) }, { stream = s })
        assert.equal(p1, buf.value[1]:data_ptr())
        assert.equal(p2, buf.value[2]:data_ptr())
      end
      s:synchronize()
      assert.equal(100, buf.value[1]:narrow(1, 1, 1):tolist()[1])
    end)

    H.gpu_window_it("close waits for pending copies; GC of an unclosed buffer never frees what a copy writes", function()
      local buf = ex.ReusableValueBuffer.like({ seq(65536):cuda() })
      local s = fh.cuda.Stream()
      spin(100, s)
      local h = buf:copy_from({ seq(65536, 9):pin_memory() }, { stream = s })
      buf:close()
      assert.is_true(h:done())
      -- an unclosed buffer dropped while its copy is pending
      local b2 = ex.ReusableValueBuffer.like({ seq(65536):cuda() })
      local addr = b2.value[1]:data_ptr()
      spin(200, s)
      local e = b2:copy_from({ seq(65536, 4):pin_memory() }, { stream = s }).event
      b2 = nil
      collectgarbage()
      collectgarbage()
      assert.is_false(e:query())
      local fresh = {}
      for i = 1, 8 do
        fresh[i] = fh.zeros({ 65536 }, { dtype = "float64", device = "cuda:0" })
        assert.are_not.equal(addr, fresh[i]:data_ptr(), "a block was reused while a copy still writes it")
      end
      e:synchronize()
    end)
  end)
end)
