-- CUDA devices, streams and events (gpu specs). Ordering specs open race
-- windows on purpose with fh.cuda._spin (a kernel that runs for a while).
local fh = require "fhelium"
local H = require "spec.helpers"
local U = require "spec.support.cuda_util"
local gpu_it = H.gpu_it

local ndev = fh.cuda.device_count()

describe("fh.cuda devices", function()
  gpu_it("reports devices and their properties", function()
    assert.is_true(fh.cuda.is_available())
    assert.equal("", fh.cuda.unavailable_reason())
    assert.is_true(ndev >= 1)
    assert.is_true(fh.info().cuda_available)
    for d = 0, ndev - 1 do
      local p = fh.cuda.get_device_properties(d)
      assert.is_string(p.name)
      assert.is_true(#p.name > 0)
      assert.is_true(p.total_memory > 2 ^ 30)
      assert.is_true(p.major >= 7)
      assert.is_true(p.multi_processor_count > 0)
      assert.same(p, fh.cuda.get_device_properties("cuda:" .. d))
    end
    assert.equal(0, fh.cuda.current_device())
    H.expect_error("CudaError", "invalid CUDA device cuda:" .. ndev, fh.cuda.get_device_properties, ndev)
    H.expect_error("CudaError", "invalid CUDA device cuda:" .. ndev, fh.zeros, { 2 }, { device = "cuda:" .. ndev })
    H.expect_error("ValueError", "expected a CUDA device", fh.cuda.synchronize, "cpu")
    fh.cuda.synchronize()
    fh.cuda.synchronize(0)
  end)

  gpu_it("set_device chooses what \"cuda\" means", function()
    fh.cuda.set_device(ndev - 1)
    assert.equal(ndev - 1, fh.cuda.current_device())
    assert.equal("cuda:" .. (ndev - 1), fh.zeros({ 2 }, { device = "cuda" }).device)
    fh.cuda.set_device(0)
    assert.equal("cuda:0", fh.zeros({ 2 }, { device = "cuda" }).device)
    H.expect_error("CudaError", "invalid CUDA device", fh.cuda.set_device, ndev)
    assert.equal(0, fh.cuda.current_device())
  end)
end)

describe("fh.cuda streams", function()
  gpu_it("starts with the default stream current on every device", function()
    for d = 0, ndev - 1 do
      local s = fh.cuda.current_stream(d)
      assert.is_true(s.is_default)
      assert.equal("cuda:" .. d, s.device)
      assert.equal(fh.cuda.default_stream(d), s)
      assert.matches("default", tostring(s))
    end
  end)

  gpu_it("creates streams with priorities clamped to the device's range", function()
    local s = fh.cuda.Stream { device = 0, priority = -1 }
    assert.equal("cuda:0", s.device)
    assert.is_false(s.is_default)
    local hi = fh.cuda.Stream { priority = -1000 } -- lower number = higher priority
    local lo = fh.cuda.Stream { priority = 1000 }
    assert.is_true(hi.priority <= s.priority and s.priority <= lo.priority)
    assert.is_true(hi.priority < lo.priority, "the device should have several priorities")
    assert.equal(0, fh.cuda.Stream {}.priority)
    assert.matches("^fhelium%.cuda%.Stream%(device=cuda:0, id=%d+, priority=%-?%d+, idle%)$", tostring(s))
    assert.are_not.equal(s.id, hi.id)
    assert.is_true(s:query())
    s:synchronize()
    H.expect_error("ValueError", "priority must be an integer", fh.cuda.Stream, { priority = 0.5 })
    H.expect_error("CudaError", "invalid CUDA device cuda:" .. ndev, fh.cuda.Stream, { device = ndev })
  end)

  gpu_it("reports the device's priority range, and clamps priorities into it", function()
    local least, greatest = fh.cuda.stream_priority_range(0)
    assert.equal(least, select(1, fh.cuda.stream_priority_range("cuda:0")))
    assert.is_true(greatest <= least, "greatest (highest priority) is the lower number")
    assert.equal(greatest, fh.cuda.Stream { priority = greatest - 5 }.priority)
    assert.equal(least, fh.cuda.Stream { priority = least + 5 }.priority)
    for p = greatest, least do assert.equal(p, fh.cuda.Stream { priority = p }.priority) end
    H.expect_error("CudaError", "invalid CUDA device", fh.cuda.stream_priority_range, ndev)
  end)

  H.gpu_window_it("names streams and prints their state in one line", function()
    local s = fh.cuda.Stream { name = "copy-in", priority = 0 }
    assert.equal("copy-in", s.name)
    assert.equal("", fh.cuda.Stream {}.name)
    assert.equal("", fh.cuda.default_stream(0).name)
    assert.matches("^fhelium%.cuda%.Stream%(device=cuda:0, id=%d+, priority=0, name=copy%-in, idle%)$", tostring(s))
    fh.cuda._spin(100, s)
    assert.matches(", busy%)$", tostring(s))
    local e = s:record_event()
    assert.matches("^fhelium%.cuda%.Event%(recorded on cuda:0 stream " .. s.id .. ", pending%)$", tostring(e))
    s:synchronize()
    assert.matches(", idle%)$", tostring(s))
    assert.matches(", complete%)$", tostring(e))
  end)

  H.gpu_window_it("set_stream makes a stream current for its device, and operations run on it", function()
    local s = fh.cuda.Stream {}
    local before = fh.cuda.current_stream(0)
    fh.cuda.set_stream(s)
    assert.equal(s, fh.cuda.current_stream(0))
    fh.cuda._spin(100) -- on s
    local a = fh.full({ 1000 }, 3, { device = "cuda" }) -- queued behind the spin
    assert.is_false(s:query(), "the fill should wait behind the spin on the current stream")
    s:synchronize()
    assert.is_true(s:query())
    fh.cuda.set_stream(before)
    assert.is_true(fh.cuda.current_stream(0).is_default)
    assert.equal(3000, fh.sum(a):item())
  end)

  gpu_it("with_stream runs fn with the stream current and restores on return and on error", function()
    local s, s2 = fh.cuda.Stream {}, fh.cuda.Stream {}
    local before = fh.cuda.current_stream(0)
    local r1, r2, r3 = fh.cuda.with_stream(s, function(x, y)
      assert.equal(s, fh.cuda.current_stream(0))
      return x + 1, y .. "!", nil
    end, 1, "a")
    assert.equal(2, r1)
    assert.equal("a!", r2)
    assert.is_nil(r3)
    assert.equal(before, fh.cuda.current_stream(0))
    local err = H.expect_error("ValueError", "boom", fh.cuda.with_stream, s, function()
      assert.equal(s, fh.cuda.current_stream(0))
      fh.errors.raise("ValueError", "boom")
    end)
    assert.equal("ValueError: boom", tostring(err))
    assert.equal(before, fh.cuda.current_stream(0))
    local ok, e = pcall(fh.cuda.with_stream, s, function() error("plain", 0) end)
    assert.is_false(ok)
    assert.equal("plain", e)
    assert.equal(before, fh.cuda.current_stream(0))
    fh.cuda.with_stream(s, function()
      fh.cuda.with_stream(s2, function() assert.equal(s2, fh.cuda.current_stream(0)) end)
      assert.equal(s, fh.cuda.current_stream(0))
      pcall(fh.cuda.with_stream, s2, function() error("inner") end)
      assert.equal(s, fh.cuda.current_stream(0))
    end)
    assert.equal(before, fh.cuda.current_stream(0))
  end)
end)

describe("fh.cuda events", function()
  H.gpu_window_it("record, query, synchronize and time work on a stream", function()
    local s = fh.cuda.Stream {}
    local e0, e1 = fh.cuda.Event { timing = true }, fh.cuda.Event { timing = true }
    assert.is_false(e0.recorded)
    assert.is_nil(e0.device)
    assert.is_true(e0:query()) -- nothing to wait for
    e0:synchronize()
    assert.equal("fhelium.cuda.Event(not recorded)", tostring(e0))
    e0:record(s)
    fh.cuda._spin(60, s)
    e1:record(s)
    assert.is_false(e1:query(), "the end event waits behind the spin")
    e1:synchronize()
    assert.is_true(e1:query())
    assert.is_true(e0.recorded)
    assert.equal("cuda:0", e1.device)
    local ms = e0:elapsed_ms(e1)
    assert.is_true(ms >= 55 and ms < 5000, "elapsed " .. ms .. " ms for a 60 ms spin")
    local plain = fh.cuda.Event {}
    plain:record(s)
    H.expect_error("ValueError", "timing=true", plain.elapsed_ms, plain, e1)
    H.expect_error("ValueError", "recorded first", e0.elapsed_ms, e0, fh.cuda.Event { timing = true })
    H.expect_error("TypeError", "expected an Event, got number", e0.elapsed_ms, e0, 1)
    local r = s:record_event()
    r:synchronize()
    assert.is_true(r:query())
    local e2 = fh.cuda.Event {}
    assert.equal(e2, e2:record()) -- the current stream; returns the event
    e2:synchronize()
  end)

  H.gpu_window_it("orders a dependent copy on another stream after an event (wait_event)", function()
    local s1, s2 = fh.cuda.Stream {}, fh.cuda.Stream {}
    local n = 2 ^ 20
    local src = fh.full({ n }, 7, { device = "cuda" })
    local dst = fh.zeros({ n }, { device = "cuda" })
    fh.cuda.synchronize()
    fh.cuda.with_stream(s1, function()
      fh.cuda._spin(150)
      src:fill_(9)
    end)
    local ev = s1:record_event()
    s2:wait_event(ev)
    dst:copy_(src, { stream = s2, non_blocking = true })
    assert.is_false(s2:query(), "s2 must wait for s1's event")
    s2:synchronize()
    assert.is_true(ev:query())
    assert.is_true(s1:query())
    assert.equal(9 * n, fh.sum(dst):item())

    -- the control: without the wait, the copy runs first and sees the old data
    local dst2 = fh.zeros({ n }, { device = "cuda" })
    fh.cuda.synchronize()
    fh.cuda.with_stream(s1, function()
      fh.cuda._spin(150)
      src:fill_(11)
    end)
    dst2:copy_(src, { stream = s2, non_blocking = true })
    s2:synchronize()
    assert.is_false(s1:query(), "s1 is still spinning: the window is real")
    s1:synchronize()
    assert.equal(9 * n, fh.sum(dst2):item())
    assert.equal(11 * n, fh.sum(src):item())
  end)

  H.gpu_window_it("orders work after everything queued on another stream (wait_stream)", function()
    local s1, s2 = fh.cuda.Stream {}, fh.cuda.Stream {}
    local a = fh.zeros({ 4096 }, { device = "cuda" })
    local b = fh.zeros({ 4096 }, { device = "cuda" })
    fh.cuda.synchronize()
    fh.cuda.with_stream(s1, function()
      fh.cuda._spin(100)
      a:fill_(5)
    end)
    assert.equal(s2, s2:wait_stream(s1))
    fh.cuda.with_stream(s2, function() fh.add(a, 1, { out = b }) end)
    s2:synchronize()
    assert.is_true(s1:query())
    assert.equal(6 * 4096, fh.sum(b):item())
  end)
end)

describe("fh.cuda streams of another device", function()
  local function two_it(name, fn) return H.gpus_it(2, name, fn) end

  two_it("are a ValueError for copies, events and operations on this device", function()
    local s1 = fh.cuda.Stream { device = 1 }
    assert.equal("cuda:1", s1.device)
    local a = fh.full({ 4 }, 2, { device = "cuda:0" })
    local b = fh.zeros({ 4 }, { device = "cuda:0" })
    H.expect_error("ValueError", "stream belongs to cuda:1 but the operation runs on cuda:0", b.copy_, b, a,
      { stream = s1 })
    H.expect_error("ValueError", "copy_: stream belongs to cuda:1 but the operation runs on cuda:0", b.copy_, b,
      fh.ones({ 4 }), { stream = s1 })
    H.expect_error("ValueError", "copy_: stream belongs to cuda:1", a.to, a, "cpu", { stream = s1 })
    H.expect_error("ValueError", "destination", a.copy_, a, fh.zeros({ 4 }, { device = "cuda:1" }), { stream = s1 })
    assert.same({ 0, 0, 0, 0 }, b:tolist()) -- nothing changed
    assert.same({ 2, 2, 2, 2 }, a:tolist())
    local e = fh.cuda.Event {}
    e:record(fh.cuda.Stream { device = 0 })
    H.expect_error("ValueError", "the event belongs to cuda:0 but the stream to cuda:1", e.record, e, s1)
    -- a stream of the destination's device is fine
    local c = fh.zeros({ 4 }, { device = "cuda:1" })
    c:copy_(a, { stream = s1 })
    assert.same({ 2, 2, 2, 2 }, c:tolist())
  end)

  two_it("are current per device: set_stream on one device leaves the other alone", function()
    local s1 = fh.cuda.Stream { device = 1 }
    fh.cuda.with_stream(s1, function()
      assert.equal(s1, fh.cuda.current_stream(1))
      assert.is_true(fh.cuda.current_stream(0).is_default)
      local t = fh.full({ 1000 }, 4, { device = "cuda:1" }) -- runs on s1
      assert.equal(4000, fh.sum(t):item())
    end)
    assert.is_true(fh.cuda.current_stream(1).is_default)
  end)

  two_it("copy between devices, contiguous or strided, both directions", function()
    local r = U.rng(H.seed("cross-device"))
    for _, dt in ipairs { "float32", "uint64", "complex128" } do
      local h = U.random(dt, { 5, 6, 7 }, r)
      local a = h:to("cuda:0")
      local b = a:to("cuda:1")
      assert.equal("cuda:1", b.device)
      U.assert_same(h, b, dt .. " cuda:0 -> cuda:1")
      local at = h:transpose(1, 3):contiguous():to("cuda:0"):transpose(1, 3) -- strided source, h's values
      assert.is_false(at:is_contiguous())
      local bt = fh.zeros({ 7, 6, 5 }, { device = "cuda:1", dtype = dt }):transpose(1, 3) -- strided destination
      bt:copy_(at)
      U.assert_same(h, bt, dt .. " strided cuda:0 -> strided cuda:1")
      local back = fh.zeros({ 5, 6, 7 }, { device = "cuda:0", dtype = dt })
      back:copy_(bt, { non_blocking = true })
      fh.cuda.synchronize(0)
      U.assert_same(h, back, dt .. " cuda:1 -> cuda:0")
    end
  end)
end)

-- Benchmark aids (scripts/bench/graph.lua): not API, but
-- their arguments are checked and their numbers must be plausible.
describe("fh.cuda benchmark aids", function()
  it("check K and reps before touching CUDA", function()
    H.expect_error("ValueError", "K", fh.cuda._raw_graph_bench, 0)
    H.expect_error("ValueError", "reps", fh.cuda._raw_graph_bench, 10, false, 0)
  end)

  gpu_it("the raw graph measures a chain of adds", function()
    local us = fh.cuda._raw_graph_bench(10, true, 20)
    assert.is_true(us > 0 and us < 1e5, "us per replay " .. us)
  end)
end)
