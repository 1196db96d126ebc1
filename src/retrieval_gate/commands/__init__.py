"""One module per CLI verb: `add_parser(subparsers)` and `run(args) -> int`. Thin: parse, then
call the function that does the work."""
