from meshplane.cli import main

main()
