from tensorkiln.cli import main

main()
