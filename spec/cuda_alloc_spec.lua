-- The CUDA caching allocator, the pinned caching allocator and
-- capture-private pools (gpu specs). Rules: engine/include/fh/cuda_alloc.h.
local fh = require "fhelium"
local H = require "spec.helpers"
local U = require "spec.support.cuda_util"
local gpu_it = H.gpu_it

local MiB = 2 ^ 20

local function quiet()
  U.collect()
  fh.cuda.synchronize()
  return fh.cuda.memory_stats(0)
end

describe("the CUDA caching allocator", function()
  gpu_it("reports statistics as numbers", function()
    local s = fh.cuda.memory_stats(0)
    for _, k in ipairs { "allocated", "requested", "reserved", "peak_allocated", "peak_reserved", "active_blocks",
      "cached_blocks", "pending_blocks", "deferred_frees", "allocations", "frees", "cuda_allocs", "cuda_frees",
      "reuses", "stream_events", "ooms", "pool_reserved" } do
      assert.is_number(s[k], k)
    end
    assert.equal(fh.cuda.memory_stats(0).allocated, fh.cuda.memory_stats("cuda:0").allocated)
    assert.is_true(s.reserved >= s.allocated)
    assert.is_true(s.peak_allocated >= s.allocated)
  end)

  gpu_it("counts an allocation by its size class and reuses the freed block on the same stream", function()
    local s0 = quiet()
    local t = fh.empty({ 1000000 }, { device = "cuda" }) -- 4,000,000 bytes: class 4 MiB
    local s1 = fh.cuda.memory_stats(0)
    assert.equal(s0.allocated + 4 * MiB, s1.allocated)
    assert.equal(s0.requested + 4000000, s1.requested)
    assert.equal(s0.active_blocks + 1, s1.active_blocks)
    assert.equal(s0.allocations + 1, s1.allocations)
    assert.is_true(s1.peak_allocated >= s1.allocated)
    local ptr = t:data_ptr()
    t = nil
    U.collect()
    local s2 = fh.cuda.memory_stats(0)
    assert.equal(s0.allocated, s2.allocated)
    assert.equal(s0.active_blocks, s2.active_blocks)
    assert.equal(s0.frees + 1, s2.frees)
    assert.equal(s1.reserved, s2.reserved) -- kept in the cache
    local u = fh.empty({ 999999 }, { device = "cuda" }) -- same class, same stream
    assert.equal(ptr, u:data_ptr())
    local s3 = fh.cuda.memory_stats(0)
    assert.equal(s2.reuses + 1, s3.reuses)
    assert.equal(s2.cuda_allocs, s3.cuda_allocs)
    fh.cuda.reset_peak_memory_stats(0)
    assert.equal(s3.allocated, fh.cuda.memory_stats(0).peak_allocated)
  end)

  gpu_it("empty_cache gives every idle cached block back to CUDA", function()
    local keep = fh.zeros({ 1000 }, { device = "cuda" })
    local t = fh.empty({ 3 * MiB }, { device = "cuda", dtype = "uint8" })
    t = nil
    local s0 = quiet()
    assert.is_true(s0.cached_blocks >= 1)
    fh.cuda.empty_cache()
    local s1 = fh.cuda.memory_stats(0)
    assert.equal(0, s1.cached_blocks)
    assert.equal(0, s1.pending_blocks)
    assert.equal(s1.allocated, s1.reserved) -- only live blocks remain
    assert.is_true(s1.cuda_frees >= s0.cuda_frees + 1)
    assert.equal(0, fh.sum(keep):item())
  end)

  H.gpu_window_it("does not hand out a block freed while another stream still reads it before that stream's event completes",
    function()
      local s = fh.cuda.Stream {}
      local n = MiB -- float32: class 4 MiB
      local a = fh.full({ n }, 5, { device = "cuda" }) -- home: the default stream
      local b = fh.zeros({ n }, { device = "cuda" })
      quiet()
      local aptr = a:data_ptr()
      fh.cuda.with_stream(s, function()
        fh.cuda._spin(300)
        b:copy_(a, { non_blocking = true }) -- s reads a after the spin
      end)
      local st0 = fh.cuda.memory_stats(0)
      a = nil
      U.collect() -- a is freed while s has not read it yet
      local st1 = fh.cuda.memory_stats(0)
      assert.equal(st0.stream_events + 1, st1.stream_events)
      assert.equal(st0.pending_blocks + 1, st1.pending_blocks)
      -- allocations of a's class on a's home stream must not get a's block
      local others = {}
      for i = 1, 4 do
        local c = fh.empty({ n }, { device = "cuda" })
        assert.are_not.equal(aptr, c:data_ptr(), "a's block was handed out while s still reads it")
        c:fill_(-1) -- would clobber a's data if it were a's block
        others[i] = c
      end
      assert.is_false(s:query(), "the reader must still be pending for this spec to mean anything")
      s:synchronize()
      assert.equal(5 * n, fh.sum(b):item())
      -- once the event has completed, the block is reusable on its home stream
      local d = fh.empty({ n }, { device = "cuda" })
      assert.equal(aptr, d:data_ptr())
      assert.equal(0, fh.cuda.memory_stats(0).pending_blocks)
    end)

  gpu_it("makes blocks cached for a destroyed stream idle, for any stream, once its work is done", function()
    local elems = 3 * MiB + 17 -- an unusual class (14 MiB)
    local s = fh.cuda.Stream {}
    local t = fh.cuda.with_stream(s, function() return fh.empty({ elems }, { device = "cuda" }) end)
    local ptr = t:data_ptr()
    t = nil
    U.collect() -- now cached for s
    local u = fh.empty({ elems }, { device = "cuda" }) -- the default stream may not take it
    assert.are_not.equal(ptr, u:data_ptr())
    s = nil
    U.collect() -- the stream is destroyed; its cached block becomes idle after an event
    fh.cuda.synchronize()
    local v = fh.empty({ elems }, { device = "cuda" })
    assert.equal(ptr, v:data_ptr())
  end)

  gpu_it("reports running out of memory as a MemoryError and stays usable", function()
    local total = fh.cuda.get_device_properties(0).total_memory
    local before = fh.cuda.memory_stats(0)
    local err = H.expect_error("MemoryError", { "CUDA out of memory on cuda:0", "tried to allocate", "reserved" },
      fh.empty, { total }, { device = "cuda", dtype = "uint8" })
    assert.equal("MemoryError", err.kind)
    assert.equal(before.ooms + 1, fh.cuda.memory_stats(0).ooms)
    local t = fh.full({ 100 }, 2, { device = "cuda" })
    assert.equal(200, fh.sum(t):item())
  end)
end)

describe("the pinned caching allocator", function()
  gpu_it("pins memory on request and caches it", function()
    U.collect()
    local t = fh.zeros({ 1000 }, { pin_memory = true })
    assert.is_true(t:is_pinned())
    assert.equal("cpu", t.device)
    local p0 = fh.cuda.pinned_memory_stats()
    assert.is_true(p0.active_blocks >= 1)
    assert.is_true(p0.allocated >= 4000)
    local ptr = t:data_ptr()
    t = nil
    U.collect()
    local t2 = fh.empty({ 999 }, { pin_memory = true })
    assert.equal(ptr, t2:data_ptr()) -- never used by a stream: idle at once
    local h = fh.arange(10, { dtype = "float64" })
    local p = h:pin_memory()
    assert.is_true(p:is_pinned())
    assert.is_false(h:is_pinned())
    assert.equal(p, p:pin_memory())
    assert.same(h:tolist(), p:tolist())
    H.expect_error("ValueError", "only cpu tensors can be pinned", function()
      local g = fh.zeros({ 1 }, { device = "cuda" })
      return g:pin_memory()
    end)
    H.expect_error("ValueError", "pin_memory=true requires device", fh.zeros, { 1 }, { device = "cuda", pin_memory = true })
  end)

  H.gpu_window_it("does not reuse a pinned block before the copy reading it has run", function()
    local s = fh.cuda.Stream {}
    local n = MiB
    local h = fh.full({ n }, 3, { pin_memory = true })
    local hptr = h:data_ptr()
    local d = fh.zeros({ n }, { device = "cuda" })
    fh.cuda.synchronize()
    fh.cuda._spin(300, s)
    d:copy_(h, { stream = s, non_blocking = true }) -- the DMA waits behind the spin
    h = nil
    U.collect()
    assert.is_true(fh.cuda.pinned_memory_stats().pending_blocks >= 1)
    for _ = 1, 3 do
      local h2 = fh.empty({ n }, { pin_memory = true })
      assert.are_not.equal(hptr, h2:data_ptr())
      h2:fill_(-7) -- would clobber the source of the pending copy
    end
    assert.is_false(s:query())
    s:synchronize()
    assert.equal(3 * n, fh.sum(d):item())
  end)
end)

describe("capture-private pools", function()
  gpu_it("route allocations to the pool and defer frees during a capture", function()
    local x = fh.full({ 4096 }, 2, { device = "cuda" })
    local dropped = fh.ones({ 4096 }, { device = "cuda" })
    local before = quiet()
    local inside
    local ok, y = fh.cuda._capture(function()
      assert.is_false(fh.cuda.current_stream(0).is_default) -- a capture stream
      local y = x * 3 + 1 -- two captured kernels; x * 3 is a temporary
      dropped = nil
      U.collect() -- frees `dropped` and the temporary: both deferred
      inside = fh.cuda.memory_stats(0)
      local e = H.expect_error("CudaGraphCaptureError", "not possible during capture", y.tolist, y)
      assert.equal("capture", e.stage)
      e = H.expect_error("CudaGraphCaptureError", "cannot be captured", fh.tensor, { 1, 2 }, { device = "cuda" })
      assert.equal("capture", e.stage)
      return y
    end)
    assert.is_true(ok, tostring(y))
    assert.is_true(fh.cuda.current_stream(0).is_default)
    assert.is_true(inside.deferred_frees >= 2, "frees during capture must be deferred")
    assert.is_true(inside.pool_reserved > before.pool_reserved)
    assert.equal(before.stream_events, inside.stream_events) -- no event recorded during the capture
    assert.equal(before.cuda_frees, inside.cuda_frees)
    local after = fh.cuda.memory_stats(0)
    assert.equal(0, after.deferred_frees)
    -- the graph ran once: 2 * 3 + 1
    assert.equal(7 * 4096, fh.sum(y):item())
    assert.same(7, y:narrow(1, 1, 1):tolist()[1])
  end)

  gpu_it("hands pool blocks back to the device cache once the pool is gone", function()
    U.collect()
    local ok, y = fh.cuda._capture(function() return fh.full({ 5 * MiB + 3 }, 1, { device = "cuda" }) end, 2)
    assert.is_true(ok, tostring(y))
    assert.equal(5 * MiB + 3, fh.sum(y):item())
    local ptr = y:data_ptr()
    y = nil
    U.collect()
    fh.cuda.synchronize()
    local z = fh.empty({ 5 * MiB + 3 }, { device = "cuda" })
    assert.equal(ptr, z:data_ptr())
  end)

  gpu_it("take the device cache's idle blocks into a new capture's pool (no cudaMalloc)", function()
    U.collect()
    local n = 7 * MiB + 5
    local ok, y = fh.cuda._capture(function() return fh.full({ n }, 1, { device = "cuda" }) end, 2)
    assert.is_true(ok, tostring(y))
    local ptr = y:data_ptr()
    y = nil
    U.collect()
    fh.cuda.synchronize()
    -- the first pool is gone: its block is an idle block of the device cache
    local before = fh.cuda.memory_stats(0)
    local ok2, y2 = fh.cuda._capture(function() return fh.full({ n }, 2, { device = "cuda" }) end, 2)
    assert.is_true(ok2, tostring(y2))
    local after = fh.cuda.memory_stats(0)
    assert.equal(ptr, y2:data_ptr())
    assert.equal(before.cuda_allocs, after.cuda_allocs)
    assert.is_true(after.pool_reserved > before.pool_reserved)
    assert.equal(2 * n, fh.sum(y2):item())
  end)

  gpu_it("never give a pool a cached block that is free for one stream only", function()
    U.collect()
    local s = fh.cuda.Stream {}
    local n = 9 * MiB + 7
    local t = fh.cuda.with_stream(s, function() return fh.full({ n }, 1, { device = "cuda" }) end)
    local ptr = t:data_ptr()
    t = nil -- free for stream s only: work queued on s may still use it
    U.collect()
    local ok, y = fh.cuda._capture(function() return fh.full({ n }, 2, { device = "cuda" }) end, 2)
    assert.is_true(ok, tostring(y))
    assert.are_not.equal(ptr, y:data_ptr())
    s:synchronize()
  end)

  gpu_it("report an error inside the captured function and end the capture cleanly", function()
    local ok, err = fh.cuda._capture(function() fh.errors.raise("ValueError", "inside") end)
    assert.is_false(ok)
    assert.equal("ValueError: inside", tostring(err))
    assert.is_true(fh.cuda.current_stream(0).is_default)
    assert.equal(0, fh.cuda.memory_stats(0).deferred_frees)
    local t = fh.full({ 10 }, 4, { device = "cuda" })
    assert.equal(40, fh.sum(t):item())
  end)
end)
