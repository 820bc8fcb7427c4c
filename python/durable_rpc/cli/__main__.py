from durable_rpc.cli import main

main()
