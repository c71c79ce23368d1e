-- Headless neovim shows fuse-all's per-line profile: start fuse-all-lsp, enable inlay hints the way a
-- user does (vim.lsp.inlay_hint.enable), let neovim draw them, and write what it drew to a JSON file:
-- per buffer line, the screen row neovim drew for it (inlay hints are drawn as ephemeral extmarks, so
-- the screen is where they are), and the hints neovim holds (vim.lsp.inlay_hint.get).
-- Arguments come as JSON in $FUSE_ALL_NVIM_TEST: python, file, root, artifact_dir, out.
local args = vim.json.decode(os.getenv('FUSE_ALL_NVIM_TEST'))
local report = { errors = {}, drawn = {} }

local function finish()
  local handle = assert(io.open(args.out, 'w'))
  handle:write(vim.json.encode(report))
  handle:close()
  vim.cmd('qall!')
end

local function drawn_hints(bufnr)
  vim.cmd('redraw!')
  local found = {}
  local window = vim.api.nvim_get_current_win()
  local last = math.min(vim.api.nvim_buf_line_count(bufnr), vim.api.nvim_win_get_height(window))
  for line = 1, last do
    local position = vim.fn.screenpos(window, line, 1)
    if position.row > 0 then
      local cells = {}
      for column = 1, vim.o.columns do
        table.insert(cells, vim.fn.screenstring(position.row, column))
      end
      found[tostring(line)] = table.concat(cells):gsub('%s+$', '')
    end
  end
  return found
end

local ok, failure = pcall(function()
  vim.o.columns, vim.o.lines = 200, 60
  vim.cmd.edit(vim.fn.fnameescape(args.file))
  local bufnr = vim.api.nvim_get_current_buf()
  local client_id = vim.lsp.start({
    name = 'fuse-all',
    cmd = { args.python, '-m', 'fuse_all_lsp' },
    root_dir = args.root,
    init_options = { artifactDir = args.artifact_dir, python = args.python },
  }, { bufnr = bufnr })
  assert(client_id, 'vim.lsp.start returned no client')
  local attached = vim.wait(20000, function()
    local client = vim.lsp.get_client_by_id(client_id)
    return client ~= nil and client.initialized and vim.lsp.buf_is_attached(bufnr, client_id)
  end, 50)
  assert(attached, 'the server did not attach within 20 s')
  vim.lsp.inlay_hint.enable(true, { bufnr = bufnr })
  local shown = vim.wait(20000, function()
    vim.cmd.redraw()
    for _, text in pairs(drawn_hints(bufnr)) do
      if text:find('/call', 1, true) then
        return true
      end
    end
    return false
  end, 100)
  assert(shown, 'no profile inlay hint was drawn within 20 s')
  report.drawn = drawn_hints(bufnr)
  report.held = {}
  for _, item in ipairs(vim.lsp.inlay_hint.get({ bufnr = bufnr })) do
    local label = item.inlay_hint.label
    if type(label) == 'table' then
      local parts = {}
      for _, part in ipairs(label) do table.insert(parts, part.value) end
      label = table.concat(parts)
    end
    table.insert(report.held, { line = item.inlay_hint.position.line + 1, label = label })
  end
end)
if not ok then
  table.insert(report.errors, tostring(failure))
end
finish()
