from stableline.cli.main import main

main()
