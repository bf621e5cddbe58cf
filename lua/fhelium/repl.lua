-- The fhelium REPL (minimal; see README "REPL").
local M = {}

function M.run()
  local fh = require "fhelium"
  local pretty = require "fhelium.pretty"
  local li = require "fhelium.lineinput"
  _G.fh = fh
  local buffer = nil
  while true do
    local line = li.readline(buffer and ">> " or "> ")
    if line == nil then break end
    local chunk = buffer and (buffer .. "\n" .. line) or line
    local src = chunk:gsub("^=", "return ")
    local fn, err = loadstring("return " .. src, "=stdin")
    if not fn then fn, err = loadstring(src, "=stdin") end
    if not fn and err:find("<eof>") then
      buffer = chunk
    else
      buffer = nil
      if not fn then
        io.stderr:write(err, "\n")
      else
        local res = { n = 0 }
        local ok, e = xpcall(function()
          local r = { fn() }
          res = { n = select("#", fn and unpack(r)) , unpack(r) }
        end, debug.traceback)
        if not ok then io.stderr:write(tostring(e), "\n")
        else
          for i = 1, #res do print(pretty.value(res[i])) end
        end
      end
    end
  end
end

return M
