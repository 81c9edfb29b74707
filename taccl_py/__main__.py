from taccl_py.cli.main import main

main()
