-- CUDA behaviour on a machine without a usable GPU (CI, development
-- machines): every query works and reports no device; every other use of
-- CUDA raises CudaError saying that no CUDA device is present. These specs
-- are skipped where a GPU is present (the gpu specs cover that case).
local fh = require "fhelium"
local H = require "spec.helpers"

local NO = "no CUDA device is present"

describe("fh.cuda without a GPU", function()
  local cpu_it = it
  if H.has_gpu then
    cpu_it = function(name) return H.skip_it(name, "a CUDA device is present") end
  end

  cpu_it("reports no device, with the reason", function()
    assert.is_false(fh.cuda.is_available())
    assert.equal(0, fh.cuda.device_count())
    assert.equal(0, fh.cuda.current_device())
    assert.matches(NO, fh.cuda.unavailable_reason())
    local info = fh.info()
    assert.is_false(info.cuda_available)
    assert.equal(0, info.device_count)
    assert.equal(fh.cuda.unavailable_reason(), info.cuda_unavailable_reason)
  end)

  cpu_it("raises CudaError for streams, events and synchronization", function()
    H.expect_error("CudaError", NO, fh.cuda.Stream)
    H.expect_error("CudaError", NO, fh.cuda.Stream, { device = 0, priority = -1 })
    H.expect_error("CudaError", NO, fh.cuda.Event)
    H.expect_error("CudaError", NO, fh.cuda.Event, { timing = true })
    H.expect_error("CudaError", NO, fh.cuda.current_stream)
    H.expect_error("CudaError", NO, fh.cuda.current_stream, 0)
    H.expect_error("CudaError", NO, fh.cuda.default_stream, "cuda:0")
    H.expect_error("CudaError", NO, fh.cuda.synchronize)
    H.expect_error("CudaError", NO, fh.cuda.set_device, 0)
    H.expect_error("CudaError", NO, fh.cuda.get_device_properties, 0)
    H.expect_error("CudaError", NO, fh.cuda._spin, 1)
    H.expect_error("CudaError", NO, fh.cuda._capture, function() end)
    H.expect_error("CudaError", NO, fh.cuda._raw_graph_bench, 10)
    H.expect_error("CudaError", NO, fh.cuda._profiler, true)
    H.expect_error("CudaError", NO, fh.cuda.stream_priority_range)
    H.expect_error("CudaError", NO, fh.cuda.stream_priority_range, 0)
    H.expect_error("CudaError", NO, fh.cuda.Stream, { name = "copy-in" })
  end)

  cpu_it("raises CudaError for memory statistics and the caches", function()
    H.expect_error("CudaError", NO, fh.cuda.memory_stats)
    H.expect_error("CudaError", NO, fh.cuda.memory_stats, 0)
    H.expect_error("CudaError", NO, fh.cuda.reset_peak_memory_stats)
    H.expect_error("CudaError", NO, fh.cuda.pinned_memory_stats)
    H.expect_error("CudaError", NO, fh.cuda.empty_cache)
  end)

  cpu_it("raises CudaError for every way of making a CUDA tensor", function()
    for _, dev in ipairs { "cuda", "cuda:0", "cuda:1" } do
      local o = { device = dev }
      H.expect_error("CudaError", NO, fh.empty, { 2, 3 }, o)
      H.expect_error("CudaError", NO, fh.zeros, { 2 }, o)
      H.expect_error("CudaError", NO, fh.ones, 4, o)
      H.expect_error("CudaError", NO, fh.full, { 2 }, 7, o)
      H.expect_error("CudaError", NO, fh.tensor, { 1, 2, 3 }, o)
      H.expect_error("CudaError", NO, fh.arange, 5, o)
      H.expect_error("CudaError", NO, fh.rand, { 3 }, o)
      H.expect_error("CudaError", NO, fh.randn, { 3 }, { device = dev, generator = fh.Generator(1) })
    end
    local t = fh.arange(6, { dtype = "float64" })
    H.expect_error("CudaError", NO, t.cuda, t)
    H.expect_error("CudaError", NO, t.cuda, t, 1)
    H.expect_error("CudaError", NO, t.to, t, "cuda")
    H.expect_error("CudaError", NO, t.to, t, "cuda:0", { non_blocking = true })
    H.expect_error("CudaError", NO, fh.tensor, t, { device = "cuda" })
    -- the CPU tensor is untouched
    assert.same({ 0, 1, 2, 3, 4, 5 }, t:tolist())
  end)

  cpu_it("raises CudaError for pinned host memory", function()
    local t = fh.ones({ 3 })
    H.expect_error("CudaError", NO, t.pin_memory, t)
    H.expect_error("CudaError", NO, fh.zeros, { 3 }, { pin_memory = true })
    H.expect_error("CudaError", NO, fh.rand, { 3 }, { pin_memory = true })
    assert.is_false(t:is_pinned())
  end)
end)

describe("fh.cuda argument checks (any machine)", function()
  it("with_stream checks its stream and function before changing anything", function()
    H.expect_error("TypeError", "expected a function", fh.cuda.with_stream, nil, 42)
    H.expect_error("TypeError", "argument 1 %(stream%) expected a Stream, got table", fh.cuda.with_stream, {},
      function() end)
    H.expect_error("TypeError", "expected a Stream, got Tensor", fh.cuda.with_stream, fh.zeros({ 1 }), function() end)
  end)

  it("set_stream and Event:record check their arguments", function()
    H.expect_error("TypeError", "expected a Stream, got number", fh.cuda.set_stream, 3)
    H.expect_error("TypeError", "expected an integer, got table", fh.cuda._capture, function() end, {})
  end)

  it("Stream checks its name before anything else", function()
    H.expect_error("TypeError", "fh.cuda.Stream: option 'name' expected a string, got number", fh.cuda.Stream,
      { name = 5 })
    H.expect_error("ValueError", "fh.cuda.Stream: option 'name' must be shorter than 32 bytes, got 40",
      fh.cuda.Stream, { name = ("x"):rep(40) })
  end)

  it("options tables reject unknown keys", function()
    H.expect_error("ValueError", "unknown option 'prio'", fh.cuda.Stream, { prio = 1 })
    H.expect_error("ValueError", "unknown option 'timeing'", fh.cuda.Event, { timeing = true })
  end)
end)
