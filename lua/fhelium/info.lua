-- `fhelium --info`: build options, CUDA availability and devices.
-- Called by the executable with the facts only it knows:
--   {line_editing=, lua_dir=, c_compiler=, cuda_compiler=, cuda_architectures=}
-- Prints to stdout; raises only if fhelium itself cannot be loaded.
return function(build)
  build = build or {}
  local fh = require "fhelium"
  local info = fh.info()
  local function line(label, value) print(("  %-16s %s"):format(label .. ":", value)) end

  print(("fhelium %s"):format(info.version))
  line("build type", (info.build_type or "?") .. (info.sanitize and " (ASan+UBSan)" or ""))
  line("C compiler", build.c_compiler or "?")
  if info.built_with_cuda then
    line("CUDA backend", ("compiled (%s, architectures %s)"):format(build.cuda_compiler or "nvcc",
      build.cuda_architectures ~= "" and build.cuda_architectures or "?"))
  else
    line("CUDA backend", "not compiled (CPU-only build)")
  end
  line("LuaJIT", jit and (jit.version .. (jit.status() and ", JIT on" or ", JIT off")) or _VERSION)
  line("REPL editing", build.line_editing or "?")
  line("Lua modules", build.lua_dir or "?")
  if fh.cuda.is_available() then
    local n = fh.cuda.device_count()
    line("CUDA available", ("yes, %d device%s"):format(n, n == 1 and "" or "s"))
    for i = 0, n - 1 do
      local p = fh.cuda.get_device_properties(i)
      print(("    cuda:%d  %s, %.1f GiB, sm_%d%d, %d SMs"):format(i, p.name, p.total_memory / 2 ^ 30, p.major,
        p.minor, p.multi_processor_count))
    end
  else
    line("CUDA available", ("no (%s)"):format(info.cuda_unavailable_reason or "unknown reason"))
  end
  line("devices", "cpu" .. (fh.cuda.is_available() and (", cuda:0 .. cuda:" .. (fh.cuda.device_count() - 1)) or ""))
end
