from stableline.cli import main

main()
