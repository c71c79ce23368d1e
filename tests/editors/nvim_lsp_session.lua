-- What the headless neovim scripts (nvim_hover.lua, nvim_inlay.lua) share: read the arguments from
-- $FUSE_ALL_NVIM_TEST (python, file, root, artifact_dir, out, and the script's own), open the file, start
-- fuse-all-lsp with vim.lsp.start as a user's config does, wait until it attaches, run the script's check,
-- and write the report (any error in report.errors) as JSON to args.out, then quit.
local M = {}

function M.run(report, check)
  local args = vim.json.decode(os.getenv('FUSE_ALL_NVIM_TEST'))
  report.errors = {}
  local ok, failure = pcall(function()
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
    check(args, bufnr, client_id)
  end)
  if not ok then
    table.insert(report.errors, tostring(failure))
  end
  local handle = assert(io.open(args.out, 'w'))
  handle:write(vim.json.encode(report))
  handle:close()
  vim.cmd('qall!')
end

return M
