from mqctl.main import main

main()
